"""A feature's top-activating contexts as text: one line per context, each token's background
shaded by its activation (orange for positive, blue for negative — a neuron can go below zero),
so the eye finds what the feature fires on. Built as HTML for a read-only QTextBrowser; the same
data goes to CSV as one row per token."""
from __future__ import annotations

import csv
import html
import io

import numpy as np

from explorer.widgets.token_stream import visible_token

POSITIVE = (249, 115, 22)  # the token chips' orange
NEGATIVE = (59, 130, 246)
TEXT = "#1b1b1b"  # dark text on a light shade; a dark shade keeps the theme's text colour
WHITE = (255, 255, 255)
MIN_ALPHA = 0.08  # the faintest tint drawn: below it a nonzero activation would look like none


def shade(value: float, scale: float, base: tuple = WHITE) -> str | None:
    """The background colour of a token with activation `value` when `scale` is the largest |activation|
    shown, blended over the view's `base` colour (a faint shade stays faint on a dark theme too); None
    for an exact zero (or NaN): such a token is not shaded at all."""
    if not np.isfinite(value) or value == 0 or scale <= 0:
        return None
    alpha = MIN_ALPHA + (1 - MIN_ALPHA) * min(abs(value) / scale, 1.0)
    tint = np.array(POSITIVE if value > 0 else NEGATIVE, float)
    under = np.array(base, float)
    r, g, b = np.rint(under + alpha * (tint - under)).astype(int)  # blended here: hex survives Qt's HTML subset
    return f"#{r:02x}{g:02x}{b:02x}"


def context_scale(contexts: list) -> float:
    """One scale for every context of a feature, so shades compare across lines."""
    peaks = [float(np.nanmax(np.abs(np.asarray(a, float)))) for _t, a in contexts if len(a)]
    peaks = [p for p in peaks if np.isfinite(p)]
    return max(peaks, default=0.0)


def _check(tokens, acts) -> np.ndarray:
    acts = np.asarray(acts, dtype=float).reshape(-1)
    if len(acts) != len(tokens):
        raise ValueError(f"a context has {len(tokens)} tokens but {len(acts)} activations; they must pair up")
    return acts


def _is_light(hex_colour: str) -> bool:
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b > 140


def token_span(token: str, value: float, scale: float, strong: bool, base: tuple = WHITE) -> str:
    text = html.escape(visible_token(token), quote=False)
    background = shade(value, scale, base)
    if background is None:
        return text
    colour = f"color:{TEXT};" if _is_light(background) else ""
    weight = "font-weight:600;" if strong else ""
    return f"<span style=\"background-color:{background};{colour}{weight}\">{text}</span>"


def context_line(tokens: list[str], acts, scale: float, base: tuple = WHITE, strong: int | None = None) -> str:
    """One context as HTML: the activation of its `strong` token (default its peak), then its tokens,
    that token bold."""
    acts = _check(tokens, acts)
    if strong is None or not 0 <= strong < len(acts):
        strong = int(np.nanargmax(np.abs(acts))) if len(acts) and np.isfinite(acts).any() else -1
    top = float(acts[strong]) if strong >= 0 else float("nan")
    spans = "".join(token_span(t, float(a), scale, i == strong, base) for i, (t, a) in enumerate(zip(tokens, acts)))
    return f"<span style=\"color:#8c8c8c\">{top:7.2f} │ </span>{spans}"


def contexts_html(contexts: list, base: tuple = WHITE) -> str:
    """Every context, one line each (no wrapping: the lines stay aligned), the strongest first as given;
    `base`: the view's background (r, g, b)."""
    if not contexts:
        return "<p style=\"color:#8c8c8c\">No context in the corpus activates this feature.</p>"
    scale = context_scale(contexts)
    lines = [context_line(list(tokens), acts, scale, base) for tokens, acts in contexts]
    return ("<div style=\"white-space:pre; font-family:monospace;\">" + "<br>".join(lines) + "</div>")


def contexts_csv(feature: int | None, contexts: list) -> str:
    """One row per token: feature, context (rank, 0 = strongest), position in it, token, activation."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["feature", "context", "position", "token", "activation"])
    for c, (tokens, acts) in enumerate(contexts):
        acts = _check(tokens, acts)
        for p, (token, value) in enumerate(zip(tokens, acts)):
            writer.writerow(["" if feature is None else feature, c, p, token, f"{float(value):.6g}"])
    return out.getvalue()


# -- grouped examples (the dashboard: top, intervals, random) ---------------------------------------------
def groups_html(groups: list, base: tuple = WHITE) -> str:
    """`groups`: (heading, [(tokens, acts, picked index)]) pairs, shown in order, a heading above each
    group's lines; one shade scale for them all, so a weak example looks weak beside the top ones; each
    line's number and bold token are the token it was picked for."""
    if not groups:
        return "<p style=\"color:#8c8c8c\">No token of the held-out text activates this feature.</p>"
    scale = context_scale([(t, a) for _name, examples in groups for t, a, _q in examples])
    parts = []
    for name, examples in groups:
        parts.append(f"<span style=\"color:#8c8c8c; font-weight:600\">{html.escape(str(name))}</span>")
        if not examples:
            parts.append("<span style=\"color:#8c8c8c\">        (no token in this range)</span>")
        parts.extend(context_line(list(tokens), acts, scale, base, int(picked)) for tokens, acts, picked in examples)
    return "<div style=\"white-space:pre; font-family:monospace;\">" + "<br>".join(parts) + "</div>"


def groups_csv(feature: int | None, groups: list) -> str:
    """contexts_csv's columns, then each example's group and whether the row is the token it was picked for."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["feature", "context", "position", "token", "activation", "group", "picked"])
    c = 0
    for name, examples in groups:
        for tokens, acts, picked in examples:
            acts = _check(tokens, acts)
            for p, (token, value) in enumerate(zip(tokens, acts)):
                writer.writerow(["" if feature is None else feature, c, p, token, f"{float(value):.6g}", name,
                                 int(p == picked)])
            c += 1
    return out.getvalue()
