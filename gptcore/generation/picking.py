"""Choosing the next token where the logits are: one pick, a few numbers back to the host.

Why on the device: reading a token with `int(argmax)`, its probability with `float(...)` and the
alternatives with `.tolist()` is one host synchronisation each, and a CUDA graph can hold the pick
only if nothing inside it asks the host anything. So `TokenPicker.pick` is tensor operations
alone — sampling.transformed_logits (the very transforms the GUI's bars use), softmax, the draw,
the top alternatives — ending in one small float64 vector. The host reads that vector once per
token (`tolist()`: the step's only wait) and `TokenPicker.read` turns it into what a
GenerationStep reports, with the semantics the streaming loop always had: the NaN check, the
probability after the transforms, the alternatives without removed ids and with a long-tail draw
appended.

The draw: `torch.multinomial(probs, 1)` checks the probabilities on the host, so it cannot be
captured. For one sample it takes argmax(probs / q) with q ~ Exp(1) from the generator (the
exponential race, the Gumbel-max trick in exponentiated form); `pick` runs those same two
operations, so one generator state draws the same token either way (a test holds it to
multinomial). The repetition penalty's set of seen ids lives on the device and the pick adds
its own token to it, so nothing but the draw's few numbers crosses over per token.
"""
from __future__ import annotations

from typing import Sequence

import torch

from gptcore.generation.sampling import check_largest_logit, context_mask, transformed_logits


class TokenPicker:
    """One generation's sampling settings, applied on the logits' device.

    Made once per settings; `begin(context, seed)` before each generation (the ids the penalty
    counts, the generator's seed), then `read(pick(logits).tolist(), position)` per token. Every
    tensor a pick reads or writes keeps its address across generations, so a captured pick
    (decode_graphs.py) stays valid while only the values change."""

    def __init__(self, *, temperature: float, top_k: int | None, top_p: float | None, repetition_penalty: float,
                 vocab_limit: int, n_alternatives: int, vocab_size: int, device):
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.repetition_penalty = repetition_penalty
        self.vocab_limit = vocab_limit
        self.n = n_alternatives
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self.greedy = temperature == 0
        self.generator = None if self.greedy else torch.Generator(device=self.device)
        # (V,) ids already in the sequence, for the penalty; written in place (a captured pick reads it)
        self.seen = (torch.zeros(vocab_size, dtype=torch.bool, device=self.device)
                     if repetition_penalty != 1.0 else None)

    @property
    def settings(self) -> tuple:
        """Everything a pick's operations depend on: a captured pick serves exactly these."""
        return self.settings_key(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                                 repetition_penalty=self.repetition_penalty, vocab_limit=self.vocab_limit,
                                 n_alternatives=self.n, vocab_size=self.vocab_size)

    @staticmethod
    def settings_key(*, temperature, top_k, top_p, repetition_penalty, vocab_limit, n_alternatives,
                     vocab_size) -> tuple:
        """`settings` from the constructor's keywords, without making a picker (a generator and a (V,)
        tensor on the device) only to look a kept one up."""
        return (temperature, top_k, top_p, repetition_penalty, vocab_limit, n_alternatives, vocab_size)

    def begin(self, context: Sequence[int], seed: int | None) -> None:
        """Start a generation: the penalty sees `context` (prompt ids), the draws follow `seed`
        (None: a fresh random seed)."""
        if self.seen is not None:
            self.seen.copy_(context_mask(context, self.vocab_size, self.device))  # (V,)
        if self.generator is not None:
            if seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(seed)

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """One position's logits (V,) -> float64 on their device: [largest usable logit, token]
        when greedy, else [largest usable logit, token, its probability, n probabilities, their n ids]
        (the n most likely after the transforms). Tensor operations only: capturable."""
        flat = logits.reshape(-1)  # (V,)
        largest = flat[:self.vocab_limit].max().reshape(1)  # (1,) NaN propagates; +inf would be the max
        x = transformed_logits(flat, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                               repetition_penalty=self.repetition_penalty, seen=self.seen,
                               vocab_limit=self.vocab_limit)  # (V,) fp32, -inf where removed
        if self.greedy:
            token = torch.argmax(x).reshape(1)  # (1,) the first of equal maxima, as torch and HF pick it
            parts = (largest, token)
        else:
            probs = torch.softmax(x, dim=-1)  # (V,)
            race = torch.empty_like(probs).exponential_(1.0, generator=self.generator)  # (V,) ~ Exp(1)
            token = torch.argmax(probs / race).reshape(1)  # (1,) what multinomial(probs, 1) draws
            top_probs, top_ids = torch.topk(probs, min(self.n, probs.shape[0]))  # (n,) each, most likely first
            parts = (largest, token, probs[token], top_probs, top_ids)
        if self.seen is not None:
            self.seen.index_fill_(0, token, True)  # the next pick penalises it too
        return torch.cat([p.to(torch.float64) for p in parts])  # (2,) or (3 + 2n,)

    def read(self, packed: Sequence[float], position: int) -> tuple[int, float, tuple[tuple[int, float], ...]]:
        """(token, prob, alternatives) from a pick's numbers on the host; raises GenerationError
        when the logits held NaN or +inf (nothing can be drawn from them)."""
        check_largest_logit(packed[0], position)
        token = int(packed[1])
        if self.greedy:
            return token, 1.0, ((token, 1.0),) if self.n else ()
        prob = packed[2]
        k = (len(packed) - 3) // 2
        alternatives = tuple((int(i), p) for p, i in zip(packed[3:3 + k], packed[3 + k:]) if p > 0.0)
        if self.n and all(t != token for t, _ in alternatives):
            alternatives = alternatives[: self.n - 1] + ((token, prob),)  # a long-tail draw
        return token, prob, alternatives
