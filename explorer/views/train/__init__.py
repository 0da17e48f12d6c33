"""The Train panel's view."""
