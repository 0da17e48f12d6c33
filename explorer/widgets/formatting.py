"""How numbers read on screen, one definition each, so every panel prints the same
probability the same way (the logit-lens column and the generation pane once disagreed:
"2e-05" against "0.0020%")."""
from __future__ import annotations


def format_prob(p: float) -> str:
    """A probability as a percentage: one decimal from 1% up, two significant digits below
    (an untrained model's tokens sit near 0.002%, which '.1%' would show as 0.0%), and
    enough digits near 100% that 99.96% does not read as a certain 100.0%."""
    pct = 100.0 * float(p)
    if pct == 0 or pct == 100:
        return f"{pct:.0f}%"
    if pct < 1:
        return f"{pct:.2g}%"
    if pct > 99.9:
        return f"{min(pct, 99.999):.3f}%"
    return f"{pct:.1f}%"
