"""The session layer (no Qt): the core (model, tokenizer, device, lock, events) and one domain per kind of question; results are numpy only."""
