"""The attention domain: every layer and head's pattern for a prompt, with prefix reuse while typing."""
