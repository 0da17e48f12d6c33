"""Benches of the app: latency through the real widgets, controllers and runner; `stream` the
session's streamed generation without Qt (what runs on a GPU machine without PySide6)."""
