"""Controllers: connect a passive view (explorer/views) to the session through the task runner."""
