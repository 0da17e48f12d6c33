"""The routes domain: information-flow routes, long prompts, exports and routes over a run's steps."""
