"""A prompt the model can read, offered when the Routes prompt cannot be encoded (issue 34).

Why: a character model from a training run cannot encode the default Mary/John prompt (a
character its corpus lacks), and a bare "characters … are not in this model's vocabulary" leaves
the user to guess what it can read. The run's own probe prompt (the one its trace kept routes and
attention for) is text from its corpus, so it always encodes. No Qt here.

Only the Routes panel offers it today; the other prompt boxes (Attention, Attribution, Generation)
could offer the same through `probe_prompt` (a note for whoever does them).
"""
from __future__ import annotations


class UnencodablePrompt(ValueError):
    """The prompt cannot be encoded; `offer` is a prompt this model can read (or None)."""

    def __init__(self, message: str, offer: str | None):
        super().__init__(message)
        self.offer = offer


def probe_prompt(info, follower_for) -> str | None:
    """The probe prompt of the run the model comes from (`info.run`; its last probe's routes prompt,
    else its sample prompt, read from the run's shared follower `follower_for(root)`), else None."""
    run = getattr(info, "run", None)
    if run is None:
        return None
    try:
        follower = follower_for(run.root)
    except (OSError, ValueError):  # the folder is gone or damaged: nothing to offer
        return None
    with follower.lock:
        series = follower.series.get(run.scheme)
        if series is None:
            return None
        for routes, (sample_prompt, _text) in zip(reversed(series.routes), reversed(series.samples)):
            if isinstance(routes, dict) and routes.get("prompt"):
                return str(routes["prompt"])
            if sample_prompt:
                return sample_prompt
    return None


def unencodable(exc: ValueError, info, encode, follower_for) -> UnencodablePrompt:
    """`exc` (the tokenizer's refusal) with the run's probe prompt offered when that one encodes."""
    offer = probe_prompt(info, follower_for)
    if offer is not None:
        try:
            encode(offer)
        except ValueError:
            offer = None
    hint = " — or use this model's training-run probe prompt (the button below the prompt)" if offer else ""
    return UnencodablePrompt(f"{exc}{hint}", offer)
