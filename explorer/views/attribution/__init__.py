"""The Attribution panel's view."""
