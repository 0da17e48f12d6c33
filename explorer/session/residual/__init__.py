"""The residual domain: residual-stream norms under each initialisation scheme, and gradient flow."""
