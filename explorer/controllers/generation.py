"""Drives the generation pane: one forward per prompt for the live distribution, and
streaming generation in a worker.

Why the logits are cached: the bars must follow the temperature / top-k / top-p sliders
at once, and a forward of GPT-2 small takes tens of milliseconds on a CPU. So the prompt
is run once (debounced while typing, in a worker) and each slider move only re-applies
the sampling transforms to the kept logits, on the GUI thread (about a millisecond).

Why generation is a streaming task: the run is a generator on the compute thread, one token
per step (other panels' work runs between two tokens), and each token it yields reaches
`on_item` on the GUI thread in order, through the runner's one stale rule: a token computed
for a model, ablation or setting no longer current is dropped on arrival, and a new Generate
supersedes the run under its key, so a late token can never land in the wrong text.
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from gptcore.generation.sampling import GPT2_VOCAB, default_vocab_limit

from explorer.widgets.formatting import format_prob
from explorer.views.generation.panel import GenerationPanel
from explorer.session.events import ModelSwapped
from explorer.controllers.base import PanelController
from explorer.views.generation.protocol import GenerationView
from explorer.controllers.live import LiveRequest

LOGITS_KEY = "generation.logits"
RUN_KEY = "generation.run"
DEBOUNCE_MS = 150
SCREENSHOT_TOKENS = 40  # what `--prompt` generates, so a screenshot shows streamed text
SHAPING_SETTINGS = ("temperature", "top_k", "top_p", "repetition_penalty")  # what the bars depend on


@dataclass
class _Run:
    """One press of Generate."""

    max_new_tokens: int
    model_name: str = ""  # who writes this text (a later model swap says so next to it)
    outdated: bool = False  # the model changed since: the status line says who wrote it
    shown: int = 0
    produced: int = 0  # tokens that arrived from the engine
    first_at: float | None = None
    last_at: float | None = None
    capture_s: float = 0.0  # the first token's extra time: CUDA graphs captured for this shape
    end_reason: str = ""
    error: str = ""


class GenerationController(PanelController[GenerationView]):
    """Feeds a GenerationPanel: the live distribution and streamed generation."""

    generationFinished = Signal(str)  # why it ended: "done", "stopped", "model changed", "error"
    task_keys = (LOGITS_KEY, RUN_KEY)
    background_keys = (RUN_KEY,)  # a generation the user started streams on behind another tab
    invalidate_when_hidden = True  # a change stops the running generation at once, shown or not

    view_class = GenerationPanel

    def __init__(self, ctx, view: GenerationView, parent: QObject | None = None):
        super().__init__(ctx, view, parent)
        view.set_vocab_size(_drawable_vocab(ctx.session))
        self.session = ctx.session
        self.runner = ctx.runner

        self.logits = None  # NextTokenLogits for the current prompt and model, or None
        self.distribution = None  # the Distribution last drawn
        self._run: _Run | None = None
        self._drawn = False  # bars, or the reason there are none, are on screen
        self._generate_when_ready = False  # set by set_prompt: generate once the logits are in
        self._hold_ready_for_run = False
        self.last_rate: float | None = None  # decode tokens/s of the last finished run
        self.last_run: _Run | None = None  # the last finished run (tokens produced, why it ended)
        self.generated_ids: list[int] = []  # token ids shown for the current / last run

        self.live = LiveRequest(self._start_logits, DEBOUNCE_MS, parent=self)
        self._debounce = self.live.timer
        self.view.promptChanged.connect(lambda _text: self.live.poke())
        self.view.settingsChanged.connect(self.redraw_distribution)
        self.view.generateRequested.connect(self.start_generation)
        self.view.stopRequested.connect(self.stop_generation)
        self._show_start()

        # After construction, so that a --prompt (PanelPage calls set_prompt right away) is the first run.
        QTimer.singleShot(0, self, self._first_refresh)

    # -- the panel contract ------------------------------------------------------------------
    def set_prompt(self, text: str) -> None:
        """Show `text`, draw its distribution, then generate a short continuation, so that
        a screenshot (`--prompt`) shows both; `dataReady` waits for that generation."""
        self.view.set_prompt_text(text)
        self._generate_when_ready = True
        self._hold_ready_for_run = True
        self.view.set_settings(max_new_tokens=SCREENSHOT_TOKENS)
        if self.session.has_model:
            self.refresh_logits()

    def invalidate(self, event) -> None:
        """Another model, ablation or setting: the running generation stops; the text on screen
        stays but says what changed since it was written (the event's own words: a model swap
        names the model that wrote it); the bars (the old distribution) are taken down; the
        status bar's tokens/s of the old run goes."""
        reason = event.reason
        swapped = isinstance(event, ModelSwapped)
        if self._run is not None:
            self._finish_run("model changed" if swapped else "stopped")
        self.runner.cancel(RUN_KEY)
        self.ctx.set_activity("")  # "generation: 5.7 tokens/s" was the old model's speed
        if swapped:
            self.view.set_prompt_note("")  # it named the old model's block_size; the new logits bring its own
        shown = self.last_run
        if shown is not None and shown.shown and not shown.outdated:
            shown.outdated = True
            who = (f"written by {shown.model_name}, the previous model; press Generate for this one"
                   if swapped else f"written before {event.detail}; press Generate to write with it")
            self.view.set_stream_status(f"{self._status_text(shown, final=True)} — {who}")
        self.logits = None
        self.distribution = None
        empty = np.zeros(0)
        self.view.set_distribution([], empty, empty, caption="<b>Next token</b>", note=_escape(reason) + "; recomputing…")

    def refresh(self) -> None:
        self.view.set_vocab_size(_drawable_vocab(self.session))
        self._show_start()
        self.refresh_logits()

    def _show_start(self) -> None:
        """The prompt's placeholder names what an empty prompt starts from, for this model's tokenizer."""
        if self.session.has_model:
            self.view.set_prompt_placeholder(
                f"Prompt (empty: the model starts from {self.session.generation.empty_start()[1]})")

    # -- the distribution ------------------------------------------------------------------
    def _first_refresh(self) -> None:
        if self.logits is None and not self.live.in_flight and self.session.has_model:
            self.refresh_logits()

    def refresh_logits(self) -> None:
        """Run the model once on the prompt (in a worker), now or right after the run in
        flight; the bars follow from the result."""
        self.live.now()

    def _start_logits(self, done) -> bool:
        if not self.session.has_model:
            return False
        text = self.view.prompt_text()
        session = self.session
        return self.submit(LOGITS_KEY, lambda cancel, progress: session.generation.next_token(text),
                           on_result=self._on_logits, on_error=self._on_logits_error, on_finished=done) > 0

    def _on_logits(self, result) -> None:
        self.logits = result
        self.view.set_prompt_note(self._prompt_note(result.context))
        self.redraw_distribution()
        if self._generate_when_ready:
            self._generate_when_ready = False
            if not self.start_generation():  # one is running already: be ready without it
                self._hold_ready_for_run = False
                self._maybe_ready()

    def _on_logits_error(self, exc: BaseException) -> None:
        self.logits = None
        detail = self.report_error(exc, "Next-token distribution").inline
        self._show_problem(f"Cannot compute the distribution: {detail}")

    def redraw_distribution(self) -> None:
        """Re-apply the current settings to the cached logits (no forward) and redraw."""
        if self.logits is None:
            return
        settings = self.view.settings()
        try:
            dist = self.session.generation.distribution(self.logits, **{k: settings[k] for k in SHAPING_SETTINGS})
        except (ValueError, RuntimeError) as exc:  # NaN logits (GenerationError), impossible settings
            self._show_problem(self.report_error(exc, "Next-token distribution").inline)
            return
        self.distribution = dist
        self._drawn = True
        self.view.set_distribution(list(dist.strings), dist.probs, dist.model_probs,
                                   caption=self._caption(settings), note=self._distribution_note(dist, settings))
        self._maybe_ready()

    def _show_problem(self, message: str) -> None:
        """No bars (old ones would be a lie), the reason in their place."""
        self.distribution = None
        empty = np.zeros(0)
        self.view.set_distribution([], empty, empty, caption="<b>Next token</b>",
                                   note=f"<span style='color:#d0342c'>{_escape(message)}</span>")
        self._drawn = True  # a message is this pane's data too: screenshot mode must not wait for more
        self._maybe_ready()

    def _caption(self, s: dict) -> str:
        ctx = self.logits.context
        where = ctx.start or f"the prompt ({len(ctx.ids)} tokens)"
        parts = ["greedy (T = 0)" if s["temperature"] == 0 else f"T = {s['temperature']:.2f}"]
        if s["top_k"]:
            parts.append(f"top-k {s['top_k']:,}")
        if s["top_p"] is not None:
            parts.append(f"top-p {s['top_p']:.2f}")
        if s["repetition_penalty"] != 1:
            parts.append(f"repetition penalty {s['repetition_penalty']:.2f}")
        return f"<b>Next token</b> after {_escape(where)} — {', '.join(parts)}"

    @staticmethod
    def _distribution_note(dist, s: dict) -> str:
        kept = dist.vocab - dist.masked_count
        if dist.masked_count == 0:
            head = f"nothing masked: all {dist.vocab:,} tokens can be drawn"
        elif s["temperature"] == 0:
            head = (f"greedy: only the most likely token can be drawn; "
                    f"masked: {dist.masked_count:,} tokens, {format_prob(dist.masked_mass)} of the model's mass")
        else:
            head = (f"masked: {dist.masked_count:,} tokens, {format_prob(dist.masked_mass)} of the model's mass "
                    f"({kept:,} can be drawn)")
        return f"{head} · entropy {dist.entropy_bits:.2f} bits"

    @staticmethod
    def _prompt_note(ctx) -> str:
        if ctx.from_start:
            return f"Empty prompt: the model starts from {ctx.start}" + (f" ({ctx.start_why})." if ctx.start_why else ".")
        if ctx.cropped:
            return (f"The prompt is {ctx.total_tokens:,} tokens, longer than this model's block_size "
                    f"({ctx.block_size:,}): the model reads only the last {ctx.block_size:,}; "
                    f"the first {ctx.cropped:,} are cropped.")
        return ""

    def _maybe_ready(self) -> None:
        if not self._hold_ready_for_run and self._drawn:
            self.mark_ready()

    # -- generation ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._run is not None

    def start_generation(self) -> bool:
        """Generate with the current prompt and settings; False if it could not start
        (no model yet, or a generation is running)."""
        if not self.session.has_model or self._run is not None:
            return False
        session = self.session
        settings = self.view.settings()
        context = session.generation.context(self.view.prompt_text())
        run = _Run(max_new_tokens=settings["max_new_tokens"], model_name=session.info.name)
        self._run = run
        self.generated_ids = []
        self.view.start_stream(context.text, _stream_note(context))
        self.view.set_running(True)
        self.view.set_stream_status("starting…")

        ids = context.ids

        def work(cancel, progress):  # a generator: one token per step, streamed to on_item
            for token in session.generation.stream(ids, settings, cancel):
                yield token, time.perf_counter()

        # For the state it started in: another model, ablation or setting stops the run (invalidate).
        self.submit(RUN_KEY, work,
                    on_item=lambda item: self._show_token(run, *item),
                    on_error=lambda exc: self._on_run_error(run, exc),
                    on_finished=lambda: self._on_run_finished(run))
        return True

    def stop_generation(self) -> None:
        """Stop after the token being computed: the engine checks the token before each step."""
        if self._run is None:
            return
        self._run.end_reason = self._run.end_reason or "stopped"
        self.runner.cancel(RUN_KEY)

    def _show_token(self, run: _Run, token, at: float) -> None:
        """One streamed token (GUI thread): `at` is when the engine produced it."""
        if run is not self._run:
            return
        run.produced += 1
        if run.first_at is None:
            run.first_at = at
        run.last_at = at
        run.capture_s += token.capture_s
        run.shown += 1
        self.generated_ids.append(token.token)
        self.view.append_token(token.text, token.prob, token.alternatives)
        self._show_rate(run, final=False)

    def _status_text(self, run: _Run, final: bool) -> str:
        rate = self._rate(run)
        status = f"{run.shown} token{'s' if run.shown != 1 else ''}"
        if rate is not None:
            status += f" · {rate:.1f} tokens/s"
        if run.capture_s > 0:
            status += f" · first token +{run.capture_s:.2f} s to capture CUDA graphs (kept for the next run)"
        if final:
            status += f" · {run.end_reason or 'done'}"
            if run.error:
                status += f": {run.error[:160]}"
        return status

    def _show_rate(self, run: _Run, final: bool) -> None:
        self.view.set_stream_status(self._status_text(run, final))
        rate = self._rate(run)
        if rate is not None:
            self.ctx.set_activity(f"generation: {rate:.1f} tokens/s")

    @staticmethod
    def _rate(run: _Run) -> float | None:
        """Decode speed: tokens after the first over the time they took (the first token
        also pays for reading the prompt, which is not decoding)."""
        if run.shown < 2 or run.last_at is None or run.last_at <= run.first_at:
            return None
        return (run.shown - 1) / (run.last_at - run.first_at)

    def _on_run_error(self, run: _Run, exc: BaseException) -> None:
        if run is not self._run:
            return
        run.end_reason = "error"
        run.error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        self._report(exc)

    def _on_run_finished(self, run: _Run) -> None:
        if run is self._run:
            if not run.end_reason:
                run.end_reason = "done" if run.produced >= run.max_new_tokens else "ended"
            self._finish_run(run.end_reason)

    def _finish_run(self, reason: str) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        if reason == "model changed" or not run.end_reason:
            run.end_reason = reason
        self.last_rate = self._rate(run)
        self.last_run = run
        self._show_rate(run, final=True)
        self.view.set_running(False)
        self.generationFinished.emit(run.end_reason)
        if self._hold_ready_for_run:
            self._hold_ready_for_run = False
            self._maybe_ready()

    def generated_text(self) -> str:
        return self.view.generated_text()

    def _report(self, exc_or_text) -> None:
        self.report_error(exc_or_text, "Generation")


def _drawable_vocab(session) -> int:
    """Top-k's ceiling: the model's vocabulary without padding ids (never drawn)."""
    return default_vocab_limit(session.config.vocab_size) if session.has_model else GPT2_VOCAB


def _stream_note(ctx) -> str:
    """Above the streamed text when the model does not read the whole prompt (an empty
    prompt needs none: the grey start token the text begins with says it)."""
    if ctx.cropped:
        return f"(… {ctx.cropped:,} earlier prompt tokens cropped: the model reads the last {ctx.block_size:,})"
    return ""


def _escape(text: str) -> str:
    return html.escape(text)
