"""The session's generation domain: the next-token distribution and streamed generation
(gptcore.generation.streaming / gptcore.generation.sampling). No Qt here.

Takes the session core explicitly (`GenerationDomain(core)`, made by `Session`); callers reach it
as `session.generation` (`context`, `next_token`, `distribution`, `stream`). The pane runs
ONE forward per prompt (`next_token`); every slider move reshapes those logits with
`distribution`, the same function the sampler uses, so the bars show what is drawn.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from explorer.session.precision import GenerationPrecision
from explorer.session.generation.results import Distribution, GeneratedToken, NextTokenLogits, PromptContext


class GenerationDomain:
    def __init__(self, core):
        self.core = core
        self.precision = GenerationPrecision(core)  # fp32, or a bf16 copy for generation (precision.py)

    def context(self, text: str) -> PromptContext:
        """The ids the model reads for `text`: its start token when empty (`empty_start`), the last
        block_size tokens when longer (tokenizer only, cheap enough for the GUI thread)."""
        tok = self.core.tokenizer
        ids = self.core.encode(text)
        start, why = "", ""
        if not ids:
            token, start, why = self.empty_start()
            ids = [token]
        block = self.core.model.config.block_size
        cropped = max(0, len(ids) - block)
        kept = ids[cropped:]
        return PromptContext(ids=np.asarray(kept, dtype=np.int64), text=tok.decode(kept), cropped=cropped,
                             total_tokens=len(ids), block_size=block, start=start, start_why=why)

    def empty_start(self) -> tuple[int, str, str]:
        """(token, what it is, why it) an empty prompt starts from: the tokenizer's end-of-text token
        (GPT-2's <|endoftext|>); a model without one (a character model) starts from a newline, as
        nanoGPT's sample.py does, or else from the first symbol of its vocabulary."""
        tok = self.core.tokenizer
        if tok.eot_token is not None:
            return int(tok.eot_token), tok.token_str(int(tok.eot_token)), ""
        vocab = self.core.require_model().config.vocab_size
        try:
            newline = self.core.encode("\n")
        except ValueError:  # an alphabet without it
            newline = []
        if len(newline) == 1 and 0 <= newline[0] < vocab:
            return newline[0], "a newline", ("this model's tokenizer has no end-of-text token; nanoGPT's sample.py "
                                             "starts a character model from a newline too")
        return 0, f"{tok.token_str(0)!r} (token 0)", ("this model's tokenizer has no end-of-text token, nor a "
                                                      "newline: the first symbol of its vocabulary stands in")

    def next_token(self, text: str) -> NextTokenLogits:
        """One forward over the (cropped) prompt; the last position's logits as numpy."""
        context = self.context(text)
        with self.core.lock:
            model, version = self.core.model, self.core.version
            self.core.check_token_ids(context.ids, model)
            model = self.precision.model_for(model)  # what generation runs: the bars show what is drawn
            with torch.inference_mode():
                x = torch.as_tensor(context.ids, device=model.device)[None]  # (1, T)
                logits = model(x, logits="last")[0, -1].float().cpu().numpy()  # (V,)
        from gptcore.generation.sampling import default_vocab_limit

        return NextTokenLogits(logits=logits, context=context, version=version,
                               vocab_limit=default_vocab_limit(logits.shape[0]))

    def distribution(self, result: NextTokenLogits, *, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None, repetition_penalty: float = 1.0,
                     rows: int = 20) -> Distribution:
        """The next-token distribution under the settings, from cached logits (no forward).

        Rows: the `rows` most likely tokens after the settings, then (where the settings
        masked tokens) the masked ones the model itself liked best, so masking shows.
        """
        from gptcore.generation.sampling import next_token_distribution

        limit = result.vocab_limit
        logits = torch.from_numpy(result.logits)
        probs = next_token_distribution(
            logits, temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty,
            context=torch.from_numpy(result.context.ids), vocab_limit=limit,
        ).double().numpy()[:limit]  # (V',)
        model_probs = torch.softmax(logits[:limit].double(), dim=-1).numpy()  # (V',) T = 1, nothing masked
        masked = probs <= 0
        # One key orders rows: kept tokens (1 + p > 1) above masked ones (the model's p <= 1).
        rank = np.where(masked, model_probs, 1.0 + probs)  # (V',)
        top = np.argpartition(-rank, min(rows, limit) - 1)[:rows]
        order = top[np.argsort(-rank[top], kind="stable")]
        kept = probs[~masked]
        entropy = float(-(kept * np.log2(kept)).sum())
        return Distribution(
            ids=order.astype(np.int64), strings=tuple(self.core.token_strings(order)),
            probs=probs[order], model_probs=model_probs[order],
            masked_count=int(masked.sum()), masked_mass=float(model_probs[masked].sum()),
            vocab=limit, entropy_bits=max(0.0, entropy),
        )

    def stream(self, ids, settings: dict, cancel=None) -> Iterator[GeneratedToken]:
        """Tokens one by one (KV-cached), each with its text and the alternatives it beat.

        The lock is taken per step, so other panels can run between tokens. The stream
        ends quietly when `cancel()` turns True or the model is swapped (the old model
        must not keep writing into a pane that now shows a new one).
        """
        import codecs

        from gptcore.generation.streaming import generate

        tok = self.core.tokenizer
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with self.core.lock:
            model, version = self.core.model, self.core.version
            self.core.check_token_ids(ids, model)
            steps = generate(self.precision.model_for(model), [int(i) for i in ids], max_new_tokens=int(settings.get("max_new_tokens", 50)),
                             temperature=settings.get("temperature", 1.0), top_k=settings.get("top_k"),
                             top_p=settings.get("top_p"), repetition_penalty=settings.get("repetition_penalty", 1.0),
                             seed=settings.get("seed"), n_alternatives=int(settings.get("n_alternatives", 8)),
                             cancel=cancel)
        try:
            while True:
                with self.core.lock:
                    if self.core.version != version:
                        return
                    step = next(steps, None)
                if step is None:
                    return
                # Multi-byte characters split over tokens (emoji) appear with the token that completes them.
                text = decoder.decode(tok.token_bytes(step.token))
                alternatives = tuple((tok.token_str(t), p) for t, p in step.alternatives)
                yield GeneratedToken(token=step.token, text=text, prob=step.prob, alternatives=alternatives,
                                     position=step.position, capture_s=step.capture_s)
        finally:
            steps.close()  # now, not when collected: a CUDA graph captured for the model is free for the next run
