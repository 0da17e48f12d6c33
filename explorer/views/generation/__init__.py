"""The Generation panel's view."""
