"""The session's attention domain: every layer's and head's attention for a prompt, live while
typing (a thin wrapper over gptcore.interp.probes.attention). No Qt here.

One forward with a bounded capture (thumbnails for every head, full resolution for
`full_layers`), numpy out. The last prompt's reusable parts (keys/values, pooled sums, per-row
stats) are kept in an AttentionState, so a keystroke runs only the changed suffix; the core drops
it (`forget`, under its lock) on a model swap, a settings change or a training step shown, and
`clear_cache()` drops it after anything else that changes what the model computes.

Takes the session core explicitly (`AttentionDomain(core)`, made by `Session`); callers reach it
as `session.attention` (`session.attention.capture(text, ...)`).
"""
from __future__ import annotations

import numpy as np

from explorer.session.attention.results import AttentionResult


class AttentionDomain:
    def __init__(self, core):
        self.core = core
        self.prefix_reuse = True  # False: every capture recomputes the whole prompt (benchmarks)
        self._state = None  # gptcore AttentionState of the last prompt
        self._state_version = -1

    def forget(self) -> None:
        """Drop the kept state (it holds the model and its keys/values); the core holds its lock."""
        self._state = None

    def capture(self, text: str, *, full_layers=(), thumb_size: int = 64, prepend_bos: bool = False,
                  lens_top_k: int = 5) -> AttentionResult:
        """Every layer's and head's attention for `text` (cropped from the left to block_size)."""
        import time

        from gptcore.interp.probes.attention import AttentionState, slack_step

        self.core.require_model()
        ids = self.core.encode(text)
        with self.core.lock:
            model, version = self.core.model, self.core.version
            bos = self.core.tokenizer.eot_token if prepend_bos else None
            if prepend_bos and bos is None:
                raise ValueError("this model's tokenizer has no end-of-text token to prepend: untick "
                                 "'prepend <|endoftext|>'")
            # Past block_size the window moves on by an eighth at a time, so keys reuse its prefix.
            settings = dict(full_layers=full_layers, thumb_size=thumb_size, lens_top_k=lens_top_k, bos=bos,
                            crop_step=slack_step(model.config.block_size))
            state = self._state
            if not self.prefix_reuse:  # a plain one-shot capture; the kept state stays as it is
                state = AttentionState(model, **settings, keep=False)
            elif state is None or self._state_version != version or not state.matches(model, **settings):
                state = self._state = None  # let the old one go before allocating anew
                state = AttentionState(model, **settings)
                self._state, self._state_version = state, version
            started = time.perf_counter()
            cap = state.capture(ids)
            elapsed = time.perf_counter() - started
        if cap.lens is not None:
            lens_ids = cap.lens.top_ids.numpy()
            lens_probs = cap.lens.top_probs.numpy()
        else:
            lens_ids = np.zeros((model.config.n_layer, 0), dtype=np.int64)
            lens_probs = np.zeros((model.config.n_layer, 0), dtype=np.float32)
        return AttentionResult(
            text=text, token_ids=np.asarray(cap.token_ids, dtype=np.int64),
            tokens=tuple(self.core.token_strings(cap.token_ids)), cropped=cap.cropped, total_tokens=len(ids),
            block_size=model.config.block_size, bos_added=cap.bos_added,
            thumbnails=cap.thumbnails.numpy(), bin_edges=cap.bin_edges.numpy(),
            full={layer: p.numpy() for layer, p in cap.full_patterns().items()}, exact=cap.exact,
            entropy=cap.entropy.numpy(), prev_token=cap.prev_token.numpy(), first_token=cap.first_token.numpy(),
            lens_ids=lens_ids, lens_probs=lens_probs,
            lens_tokens=tuple(tuple(self.core.token_strings(row)) for row in lens_ids),
            version=version, forward_s=elapsed, reused_tokens=cap.meta.get("reused_tokens", 0),
            crop_step=settings["crop_step"],
        )

    def clear_cache(self) -> None:
        """Forget the kept attention state (call after anything that changes what the model computes)."""
        with self.core.lock:
            self.forget()

    def cache_bytes(self) -> int:
        """Memory the kept attention state holds on the model's device (0 when none)."""
        state = self._state
        return state.nbytes() if state is not None else 0
