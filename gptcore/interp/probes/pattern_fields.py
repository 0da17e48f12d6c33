"""The facts derived from an attention capture's arrays, written once.

`AttentionCapture` uses them; the app's numpy `AttentionResult` does not re-derive them: the
session hands it `exact` and `full_patterns()` already decided here, so the rule "unpooled
thumbnails ARE the full patterns" lives in this one place. No imports: the properties only
index and read `.shape`, which tensors and arrays share.
"""
from __future__ import annotations


class PatternFields:
    """Mixin for a dataclass with `token_ids`, `thumbnails` (L, nh, t, t) and `full` {layer: (nh, T, T)}."""

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def n_layer(self) -> int:
        return self.thumbnails.shape[0]

    @property
    def n_head(self) -> int:
        return self.thumbnails.shape[1]

    @property
    def exact(self) -> bool:
        """True when no pooling happened: the thumbnails are the full patterns."""
        return self.thumbnails.shape[-1] == self.n_tokens

    def has_full(self, layer: int) -> bool:
        return self.exact or layer in self.full

    def full_patterns(self) -> dict:
        """layer -> (nh, T, T) full-resolution patterns of every layer this capture can show at full
        resolution: all of them when nothing was pooled (views of the thumbnails, no copy)."""
        if self.exact:
            return {layer: self.thumbnails[layer] for layer in range(self.n_layer)}
        return dict(self.full)

    def pattern(self, layer: int, head: int):
        """(T, T) full-resolution pattern of one head, if this capture holds it (see has_full)."""
        if layer in self.full:
            return self.full[layer][head]
        if self.exact:
            return self.thumbnails[layer, head]
        raise KeyError(f"layer {layer} was captured as thumbnails only; ask for full_layers=[{layer}]")
