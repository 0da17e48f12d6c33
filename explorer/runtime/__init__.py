"""Background work: the keyed task runner (one warm compute thread), devices, child processes."""
