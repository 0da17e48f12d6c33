"""Follow a training run folder: read its trace as it grows into series a Train panel can draw.

Why a module of its own (no Qt, no torch): a run folder is the one interface between a training
and whoever watches it — a run the app started, one in a terminal, a torchrun job on a shared
disk — so following it is the same code for all of them, and testable without a window.
gptcore's `TraceReader` does the file work (partial last lines, deletion, truncation); this
keeps what was read, per init scheme, as plain lists, and never forgets it on an error: a run
folder deleted or damaged while followed raises `RunFollowError` with the reader's words, and
everything read before stays for the charts.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from gptcore.training.run import RunFolder, RunFolderError
from gptcore.training.trace import TERMINAL, TraceError, TraceReader



class RunFollowError(ValueError):
    """The run folder cannot be followed any more (or at all); the message says why and what to do."""


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
    icl: list = field(default_factory=list)  # per probe: the ICL score (None when not measured)
    samples: list = field(default_factory=list)  # per probe: (prompt, text)
    kept_steps: dict = field(default_factory=dict)  # step -> weights path relative to the run folder
    diverged: str = ""

    def add_train(self, r: dict) -> None:
        n = len(self.train_step)
        self.train_step.append(int(r["step"]))
        self.train_loss.append(_num(r.get("loss")))
        self.train_time.append(_num(r.get("time")))
        self.lr.append(_num(r.get("lr")))
        self.tokens_per_s.append(_num(r.get("tokens_per_s")))
        for part, value in (r.get("grad_norms") or {}).items():
            column = self.grad_norms.setdefault(part, [float("nan")] * n)
            column.append(_num(value))
        for column in self.grad_norms.values():  # a part missing from this record
            if len(column) < n + 1:
                column.append(float("nan"))


class RunFollower:
    """`poll()` reads what the run wrote since the last poll; the series accumulate here."""

    def __init__(self, root):
        self.folder = RunFolder(Path(root).expanduser())
        self.meta: dict | None = None
        self.reader = TraceReader(self.folder.trace)
        self.series: dict[str, SchemeSeries] = {}
        self.schemes: list[str] = []
        self.state = "waiting"  # waiting (no trace yet), running, done, stopped, error
        self.end_message = ""
        self.messages: list[str] = []
        self.max_iters = 0
        self.step = 0  # the latest step any record mentions
        self.memory_mb: float | None = None  # the training process's peak memory (train records' memory_mb)
        self.records = 0

    @property
    def root(self) -> Path:
        return self.folder.root

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    # -- reading -----------------------------------------------------------------------------------
    def poll(self) -> bool:
        """Read new records; True if anything changed. RunFollowError when the folder is gone or
        damaged (what was read stays)."""
        if self.meta is None:
            self._read_meta()
            if self.meta is None:
                return False
        try:
            records = self.reader.poll()
        except TraceError as exc:
            raise RunFollowError(f"{exc}. What was read before is still shown.") from None
        for record in records:
            self._take(record)
        return bool(records)

    def _read_meta(self) -> None:
        if not self.folder.root.exists():
            return  # a run the panel just started: its child creates the folder
        if not self.folder.run_json.is_file():
            if self.folder.root.is_dir() and any(self.folder.root.iterdir()):
                raise RunFollowError(f"{self.folder.root} is not a run folder (no run.json); choose the --out_dir "
                                     f"of a run started by `python -m gptcore.train` or by this panel")
            return  # an empty folder: a run that is just starting
        try:
            self.meta = self.folder.read_meta()
        except RunFolderError as exc:
            raise RunFollowError(str(exc)) from None
        self.schemes = [str(s) for s in self.meta.get("schemes") or []]
        for scheme in self.schemes:
            self.series.setdefault(scheme, SchemeSeries())
        self.max_iters = int((self.meta.get("train_config") or {}).get("max_iters") or 0)

    def _scheme(self, record: dict) -> SchemeSeries:
        name = str(record.get("scheme") or (self.schemes[0] if self.schemes else "model"))
        if name not in self.series:
            self.series[name] = SchemeSeries()
            self.schemes.append(name)
        return self.series[name]

    def _take(self, r: dict) -> None:
        kind = r.get("kind")
        self.records += 1
        if isinstance(r.get("step"), int):
            self.step = max(self.step, r["step"] + (1 if kind == "train" else 0))
        if kind == "start":  # a new run, or a resume of a stopped one
            self.state, self.end_message = "running", ""
            self.max_iters = int(r.get("max_iters") or self.max_iters)
            for scheme in r.get("schemes") or []:
                self._scheme({"scheme": scheme})
        elif kind == "train":
            self._scheme(r).add_train(r)
            if isinstance(r.get("memory_mb"), (int, float)):
                self.memory_mb = float(r["memory_mb"])
        elif kind == "eval":
            s = self._scheme(r)
            s.eval_step.append(int(r["step"]))
            s.eval_train.append(_num(r.get("train")))
            s.eval_val.append(_num(r.get("val")))
        elif kind == "probe":
            s = self._scheme(r)
            s.probe_step.append(int(r["step"]))
            s.census.append(r.get("census") or {})
            s.icl.append(_num((r.get("icl") or {}).get("score")))
            sample = r.get("sample") or {}
            s.samples.append((str(sample.get("prompt", "")), str(sample.get("text", ""))))
        elif kind == "checkpoint":
            if r.get("path"):
                self._scheme(r).kept_steps[int(r["step"])] = str(r["path"])
        elif kind == "message":
            self.messages.append(str(r.get("text", "")))
        elif kind == "diverged":
            self._scheme(r).diverged = str(r.get("message", ""))
            self.messages.append(f"{r.get('scheme')}: {r.get('message')}")
        elif kind in TERMINAL:
            self.state = kind
            self.end_message = str(r.get("message") or r.get("reason") or "")

    # -- what the panel shows ------------------------------------------------------------------
    def corpus_label(self) -> str:
        """"pydoc topics, char": the corpus and tokenizer, as the status bar says them."""
        meta = self.meta or {}
        corpus = (meta.get("corpus") or {}).get("name") or "corpus"
        kind = (meta.get("tokenizer") or {}).get("kind") or ""
        return f"{corpus}, {kind}" if kind else str(corpus)

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

    def kept_steps(self, scheme: str) -> list[int]:
        s = self.series.get(scheme)
        return sorted(s.kept_steps) if s is not None else []

    def weights_path(self, scheme: str, step: int) -> Path:
        rel = self.series[scheme].kept_steps.get(step)
        return self.folder.root / rel if rel else self.folder.step_weights(scheme, step)

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

    def census_stack(self, scheme: str, name: str):
        """(steps, [L][H] per probe) of one census score for one scheme."""
        s = self.series.get(scheme)
        if s is None:
            return [], []
        kept = [(step, c[name]) for step, c in zip(s.probe_step, s.census) if name in c]
        return [k[0] for k in kept], [k[1] for k in kept]

    def describe(self) -> str:
        """One line on the run: its state, step, corpus."""
        where = f"step {self.step:,} of {self.max_iters:,}" if self.max_iters else f"step {self.step:,}"
        words = {"waiting": "starting", "running": "running", "done": "finished", "stopped": "stopped",
                 "error": "failed"}[self.state]
        tail = f" ({self.end_message})" if self.end_message and self.state != "done" else ""
        return f"{words}{tail} · {where} · {self.corpus_label()} · {self.folder.root}"


RECENT_RUNS_KEY = "train/recent_runs"  # QSettings key: run folders, latest first (File → Recent runs)
RECENT_RUNS_MAX = 8


def recent_runs(settings) -> list[str]:
    """Run folders followed lately that still exist, latest first ([] without settings)."""
    if settings is None:
        return []
    value = settings.value(RECENT_RUNS_KEY, []) or []
    value = [value] if isinstance(value, str) else list(value)
    return [str(p) for p in value if Path(str(p)).is_dir()][:RECENT_RUNS_MAX]


def remember_run(settings, root) -> None:
    if settings is not None:
        root = str(Path(root))
        settings.setValue(RECENT_RUNS_KEY, [root, *[p for p in recent_runs(settings) if p != root]][:RECENT_RUNS_MAX])


def default_runs_dir() -> Path:
    """Where the panel puts new runs: the user's data folder / runs."""
    import platformdirs

    return Path(platformdirs.user_data_dir("gpt-explorer", appauthor=False)) / "runs"


def new_run_dir(base: Path | None = None) -> Path:
    """A fresh, not yet existing run folder named by the time (…/runs/2026-12-02_05-10-33)."""
    base = Path(base) if base is not None else default_runs_dir()
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    path, n = base / stamp, 1
    while path.exists():
        n += 1
        path = base / f"{stamp}_{n}"
    return path


def read_run_summary(root) -> dict:
    """run.json's model and train configs, for the panel's form (RunFollowError if unreadable)."""
    try:
        return RunFolder(root).read_meta()
    except RunFolderError as exc:
        raise RunFollowError(str(exc)) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFollowError(f"{root}: {exc}") from None


def _num(value) -> float:
    """A trace number (null -> NaN, so a chart leaves a gap)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
