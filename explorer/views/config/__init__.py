"""The Config panel's view."""
