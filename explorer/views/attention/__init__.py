"""The Attention panel's view."""
