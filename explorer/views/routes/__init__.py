"""The Routes panel: information-flow routes drawn layer by layer (issue 29)."""
