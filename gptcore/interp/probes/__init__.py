"""Probes: one forward pass with hooks, returning only what a view needs (attention, residual, lens)."""
