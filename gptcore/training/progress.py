"""A run's trace interpreted: what each record means for the run's state and its series per init scheme.

Why here, beside trace.py (which reads and writes the records): every watcher of a run folder — the
app's Train panel, a bench, a script — needs the same reading of the records (a "start" after a
"stopped" is a resume, a "train" record's step counts the step it ran, a "checkpoint" keeps a step's
weights), and that reading is said once, here. No torch, no Qt: plain lists of numbers.

    progress = RunProgress()
    for record in TraceReader(path).poll():
        progress.take(record)
    progress.state, progress.step, progress.series["gpt2"].eval_val
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gptcore.training.trace import TERMINAL

STATE_WORDS = {"waiting": "starting", "running": "running", "done": "finished", "stopped": "stopped",
               "error": "failed"}


@dataclass
class SchemeSeries:
    """What one init scheme recorded: train steps, evals, probes, kept weights."""

    train_step: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    train_time: list = field(default_factory=list)  # Unix time of each train record (for the ETA)
    lr: list = field(default_factory=list)
    grad_norms: dict = field(default_factory=dict)  # part name -> list aligned with train_step
    tokens_per_s: list = field(default_factory=list)
    eval_step: list = field(default_factory=list)
    eval_train: list = field(default_factory=list)
    eval_val: list = field(default_factory=list)
    probe_step: list = field(default_factory=list)
    census: list = field(default_factory=list)  # per probe: {score name: [[layer][head]]}
    icl: list = field(default_factory=list)  # per probe: the ICL score (NaN when not measured)
    samples: list = field(default_factory=list)  # per probe: (prompt, text)
    routes: list = field(default_factory=list)  # per probe: {"prompt", "edges": [[src, dst, w], …]} or None
    kept_steps: dict = field(default_factory=dict)  # step -> weights path relative to the run folder
    diverged: str = ""

    def add_train(self, r: dict) -> None:
        n = len(self.train_step)
        self.train_step.append(int(r["step"]))
        self.train_loss.append(num(r.get("loss")))
        self.train_time.append(num(r.get("time")))
        self.lr.append(num(r.get("lr")))
        self.tokens_per_s.append(num(r.get("tokens_per_s")))
        for part, value in (r.get("grad_norms") or {}).items():
            column = self.grad_norms.setdefault(part, [float("nan")] * n)
            column.append(num(value))
        for column in self.grad_norms.values():  # a part missing from this record
            if len(column) < n + 1:
                column.append(float("nan"))

    def add_probe(self, r: dict) -> None:
        self.probe_step.append(int(r["step"]))
        self.census.append(r.get("census") or {})
        self.icl.append(num((r.get("icl") or {}).get("score")))
        sample = r.get("sample") or {}
        self.samples.append((str(sample.get("prompt", "")), str(sample.get("text", ""))))
        routes = r.get("routes")
        self.routes.append(routes if isinstance(routes, dict) else None)


class RunProgress:
    """`take(record)` for each record in order; the state and the series accumulate here."""

    def __init__(self, schemes=(), max_iters: int = 0):
        self.series: dict[str, SchemeSeries] = {}
        self.schemes: list[str] = []
        self.state = "waiting"  # waiting (no record yet), running, done, stopped, error
        self.end_message = ""
        self.messages: list[str] = []
        self.max_iters = int(max_iters)
        self.step = 0  # the latest step any record mentions (a train record: the steps done after it)
        self.memory_mb: float | None = None  # the training process's peak memory (train records' memory_mb)
        self.records = 0
        for scheme in schemes:
            self.scheme(str(scheme))

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    def scheme(self, name: str | None) -> SchemeSeries:
        """The series of `name` (the first scheme's when a record names none), created on first use."""
        name = str(name or (self.schemes[0] if self.schemes else "model"))
        if name not in self.series:
            self.series[name] = SchemeSeries()
            self.schemes.append(name)
        return self.series[name]

    def take(self, r: dict) -> None:
        kind = r.get("kind")
        self.records += 1
        if isinstance(r.get("step"), int):
            self.step = max(self.step, r["step"] + (1 if kind == "train" else 0))
        if kind == "start":  # a new run, or a resume of a stopped one
            self.state, self.end_message = "running", ""
            self.max_iters = int(r.get("max_iters") or self.max_iters)
            for scheme in r.get("schemes") or []:
                self.scheme(scheme)
        elif kind == "train":
            self.scheme(r.get("scheme")).add_train(r)
            if isinstance(r.get("memory_mb"), (int, float)):
                self.memory_mb = float(r["memory_mb"])
        elif kind == "eval":
            s = self.scheme(r.get("scheme"))
            s.eval_step.append(int(r["step"]))
            s.eval_train.append(num(r.get("train")))
            s.eval_val.append(num(r.get("val")))
        elif kind == "probe":
            self.scheme(r.get("scheme")).add_probe(r)
        elif kind == "checkpoint":
            if r.get("path"):
                self.scheme(r.get("scheme")).kept_steps[int(r["step"])] = str(r["path"])
        elif kind == "message":
            self.messages.append(str(r.get("text", "")))
        elif kind == "diverged":
            self.scheme(r.get("scheme")).diverged = str(r.get("message", ""))
            self.messages.append(f"{r.get('scheme')}: {r.get('message')}")
        elif kind in TERMINAL:
            self.state = kind
            self.end_message = str(r.get("message") or r.get("reason") or "")

    # -- reading the series ---------------------------------------------------------------------
    def kept_steps(self, scheme: str) -> list[int]:
        s = self.series.get(scheme)
        return sorted(s.kept_steps) if s is not None else []

    def latest_val(self, scheme: str, step: int | None = None) -> float | None:
        """The val loss at `step` (or the latest), None when no eval was recorded there."""
        s = self.series.get(scheme)
        if s is None or not s.eval_step:
            return None
        if step is None:
            return s.eval_val[-1]
        for at, val in zip(s.eval_step, s.eval_val):
            if at == step:
                return val
        return None

    def census_stack(self, scheme: str, name: str):
        """(steps, [L][H] per probe) of one census score for one scheme."""
        s = self.series.get(scheme)
        if s is None:
            return [], []
        kept = [(step, c[name]) for step, c in zip(s.probe_step, s.census) if name in c]
        return [k[0] for k in kept], [k[1] for k in kept]

    def rate(self, window: int = 50) -> tuple[float, float]:
        """(tokens/s, seconds left) from the last `window` train records of the first scheme (a pause
        or a resume long ago does not count); (0, 0) when unknown."""
        if not self.schemes:
            return 0.0, 0.0
        s = self.series[self.schemes[0]]
        recent = [v for v in s.tokens_per_s[-20:] if v == v]
        tokens = sum(recent) / len(recent) if recent else 0.0
        if len(s.train_step) < 3 or self.finished:
            return tokens, 0.0
        n = min(window, len(s.train_step))
        steps = s.train_step[-1] - s.train_step[-n]
        per_step = (s.train_time[-1] - s.train_time[-n]) / steps if steps > 0 else 0.0
        return tokens, max(0, self.max_iters - self.step) * max(per_step, 0.0)


def num(value) -> float:
    """A trace number (null -> NaN, so a chart leaves a gap)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
