"""The training domain: runs started, followed and scrubbed; a run's steps shown in the session."""
