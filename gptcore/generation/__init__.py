"""Sampling settings and KV-cached streaming generation."""
