"""Benches of the app: latency through the real widgets, controllers and runner."""
