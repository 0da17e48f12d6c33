"""Shared passive widgets the views are built from (heat-map grid, token chips, charts). Never torch, gptcore or the session."""
