"""Controllers: connect a passive panel (explorer/panels) to the session through the task runner."""
