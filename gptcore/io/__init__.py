"""What a path holds, safe readers, renaming tables per source layout, hub, exports, tokenizers."""
