"""The attention head count of a checkpoint that does not record it.

No tensor shape holds the head count: c_attn is (3C, C) whether C is split into 1 head or 12.
The book's `model.pth` (a bare state dict of its GPTModel), a lone .safetensors file and a plain
torch state dict therefore load with a head count that came from somewhere else: config.json
next to the file, the user (`n_head=` / `--n-head`), or a guess. A wrong guess is not a small
error: a 4-head, 96-wide model opened as 1 head gave logits 0.148 away from the real ones. So
neither the app nor the command line guesses: `load` raises `HeadCountNeeded`, which the window
turns into a dialog and `python -m gptcore info` into an error naming `--n-head` (exit 2).
`load(..., guess_heads=True)` still guesses, with a warning, for a caller that asks for it.
"""
from __future__ import annotations

import math
from pathlib import Path

from gptcore.io.checkpoints import LoadError

# What the book (Build a Large Language Model (From Scratch), ch. 4) uses: GPT_CONFIG_124M.
BOOK_DEFAULTS = "the book's GPT_CONFIG_124M: 12 heads at width 768 (emb_dim), 64 per head"
GPT2_HEADS = {768: 12, 1024: 16, 1280: 20, 1600: 25}  # the published GPT-2 sizes, by width


def head_count_choices(n_embd: int) -> list[int]:
    """Every head count that divides `n_embd`, the likeliest first: 64-wide heads (GPT-2, the
    book, nanoGPT's presets) when 64 divides the width, then head sizes nearest to 64."""
    n_embd = int(n_embd)
    divisors = [n for n in range(1, n_embd + 1) if n_embd % n == 0]
    first = GPT2_HEADS.get(n_embd, n_embd // 64 if n_embd % 64 == 0 else None)
    return sorted(divisors, key=lambda n: (n != first, abs(math.log2(n_embd / n / 64)), n))


class HeadCountNeeded(LoadError):
    """The file does not say how many heads its model has; the caller must choose.

    `choices` are head counts that divide the width, likeliest first (`head_count_choices`);
    loading again with `n_head=` one of them succeeds."""

    title = "How many attention heads?"

    def __init__(self, path: Path, n_embd: int):
        self.path, self.n_embd = Path(path), int(n_embd)
        self.choices = head_count_choices(n_embd)
        shown = ", ".join(str(n) for n in self.choices[:8]) + (", …" if len(self.choices) > 8 else "")
        super().__init__(
            f"{self.path} does not record how many attention heads its model has (no tensor shape does; the book's "
            f"GPTModel saves only weights), and a wrong count changes every output. Width {self.n_embd} splits into "
            f"{shown} heads (likeliest first; {BOOK_DEFAULTS}). Give the count the model was trained with: "
            f"--n-head N on the command line (e.g. --n-head {self.choices[0]}), n_head= in Python, or a "
            f"config.json with n_head next to the file.")
