"""The residual panel's caption: the figures that carry the lesson for the curves shown, in words.

Split from panel.py along the drawing/explaining seam: this is text from numbers only (the
curves' means per scheme and the architecture they were measured on), no widgets.
"""
from __future__ import annotations

import math
from typing import Sequence


def caption_text(view: str, data: dict, ticked: Sequence[str]) -> str:
    """The figures that carry the lesson, for the curves shown, and what they mean
    under the architecture they were measured on (never a claim the data contradict)."""
    ctx = data["context"]
    shown = [(name, data["values"][s].mean(axis=0)) for s, name in enumerate(data["schemes"])
             if name in ticked]
    if not shown:
        return "No scheme ticked: tick one on the left."
    if view == "norms":
        figures = ", ".join(f"{n} ×{m[-1] / m[0]:.3g}" if m[0] > 0 else f"{n} —" for n, m in shown)
        text = f"<b>Growth from embedding to the last block</b> (final ÷ embedding): {figures}."
        means = dict(shown)
        n_layer = ctx.get("n_layer")
        if ctx.get("residual", True) and ctx.get("ln_placement") == "pre":
            if "gpt2" in means and "gpt2-unscaled" in means and n_layer:
                ratio = means["gpt2-unscaled"][-1] / means["gpt2"][-1]
                text += (f" Last layer, gpt2-unscaled ÷ gpt2 = {ratio:.3g}: the blocks' writes alone differ by "
                         f"√(2·{n_layer}) = {math.sqrt(2 * n_layer):.3g}, the embedding is common to both.")
            text += (" Every block <i>adds</i> two writes to the stream, so their variances pile up; GPT-2 draws "
                     "those writes (attn/mlp c_proj) √(2·n_layer) times smaller, so all 2·n_layer sum to O(1).")
        elif not ctx.get("residual", True):
            text += (" Without residual connections nothing accumulates: each block's output <i>replaces</i> the "
                     "stream, and GPT-2's down-scaled writes shrink it block after block.")
        else:
            text += " Post-LN ends every block with a LayerNorm, so the stream is re-normalised to √width each time."
        return text
    figures = ", ".join(f"{n} {m[0] / m[-1]:.2g}" if m[-1] > 0 else f"{n} —" for n, m in shown)
    text = (f"<b>Gradient at the first block ÷ at the last</b>: {figures}. ≈ 1: early blocks learn as fast as "
            "late ones; ≪ 1: they starve; ≫ 1: they get more.")
    if data["comparison"] is not None:
        other = [(n, data["comparison"][data["schemes"].index(n)].mean(axis=0)) for n, _m in shown]
        text += " <b>Dashed</b> (" + data["comparison_label"] + "): " + ", ".join(
            f"{n} {m[0] / m[-1]:.2g}" if m[-1] > 0 else f"{n} —" for n, m in other) + "."
    residual = ctx.get("residual", True)
    without = data["values"] if not residual else data["comparison"]  # the no-shortcut set, if measured
    if without is not None:
        means = [without[data["schemes"].index(n)].mean(axis=0) for n, _m in shown]
        ratios = [m[0] / m[-1] for m in means if m[-1] > 0]
        if ratios and min(ratios) < 1e-3:
            text += (" Without shortcuts the gradient to block 0 is a product of every later block's Jacobian; "
                     "it vanishes here where the forward signal itself dies (see the norm view).")
        else:
            text += (" A LayerNorm in every block re-normalises the signal both ways, so removing the "
                     "shortcuts alone does not starve block 0 here; narrow the model (width 64, gpt2 scheme) to "
                     "see signal and gradient die.")
    if (residual or data["comparison"] is not None) and ctx.get("ln_placement") == "pre":
        text += (" With shortcuts, pre-LN divides each block's input by the stream's scale, so where the stream "
                 "grows (unscaled schemes) late blocks get less gradient; gpt2's scaling keeps it even.")
    return text
