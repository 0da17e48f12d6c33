"""The Residual panel's view."""
