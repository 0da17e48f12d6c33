"""Follow a training run folder: its trace read as it grows, interpreted by gptcore's RunProgress.

Why a module of its own (no Qt, no torch): a run folder is the one interface between a training and
whoever watches it — a run the app started, one in a terminal, a torchrun job on a shared disk — so
following it is the same code for all of them, and testable without a window. gptcore does the
work: `TraceReader` reads the file (partial last lines, deletion, truncation), `RunProgress`
(gptcore/training/progress.py) says what each record means. This adds the folder around them:
run.json, a trace that is missing (the kept steps and ckpt.pt are read from the folder instead),
and never forgets what was read on an error: a run folder deleted or damaged while followed raises
`RunFollowError` naming what happened, and everything read before stays for the charts.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from gptcore.training.progress import STATE_WORDS, RunProgress
from gptcore.training.run import RunFolder, RunFolderError
from gptcore.training.trace import TraceError, TraceReader


class RunFollowError(ValueError):
    """The run folder cannot be followed any more (or at all); the message says why and what to do."""


class RunFollower(RunProgress):
    """A RunProgress fed from a run folder: `poll()` reads what the run wrote since the last poll.

    Thread rule: `poll()` runs on the compute thread (a task) while the Train panel draws on the
    GUI thread, so both hold `lock` (poll takes it itself; a reader takes it around what it reads)."""

    def __init__(self, root):
        super().__init__()
        self.lock = threading.RLock()
        self.folder = RunFolder(Path(root).expanduser())
        self.meta: dict | None = None
        self.reader = TraceReader(self.folder.trace)
        self.note = ""  # what the folder lacks, when it is read without its trace

    @property
    def root(self) -> Path:
        return self.folder.root

    @property
    def without_trace(self) -> bool:
        return bool(self.note)

    # -- reading -----------------------------------------------------------------------------------
    def poll(self) -> bool:
        """Read new records; True if anything changed. RunFollowError when the folder is gone or
        damaged (what was read stays)."""
        with self.lock:
            return self._poll()

    def _poll(self) -> bool:
        if self.meta is None:
            self._read_meta()
            if self.meta is None:
                return False
        if not self.folder.trace.is_file() and self.root.is_dir() and (self.records == 0 or self.without_trace):
            return self._read_checkpoints()  # never written, or deleted before we read any of it
        try:
            records = self.reader.poll()
        except TraceError as exc:
            raise RunFollowError(self._lost_trace(exc)) from None
        for record in records:
            self.take(record)
        return bool(records)

    def _lost_trace(self, exc: TraceError) -> str:
        if self.root.is_dir() and not self.folder.trace.exists():
            return (f"{self.folder.trace.name} was deleted from {self.root} while it was followed: the charts stop "
                    f"here; the kept steps and ckpt.pt stay usable (open the folder again to read them)")
        return f"{exc}. What was read before is still shown."

    def _read_meta(self) -> None:
        if not self.root.exists():
            return  # a run the panel just started: its child creates the folder
        if not self.folder.run_json.is_file():
            if self.root.is_dir() and any(self.root.iterdir()):
                raise RunFollowError(f"{self.root} is not a run folder (no run.json); choose the --out_dir "
                                     f"of a run started by `python -m gptcore.train` or by this panel")
            return  # an empty folder: a run that is just starting
        try:
            self.meta = self.folder.read_meta()
        except RunFolderError as exc:
            raise RunFollowError(str(exc)) from None
        for scheme in self.meta.get("schemes") or []:
            self.scheme(str(scheme))
        self.max_iters = int((self.meta.get("train_config") or {}).get("max_iters") or 0)

    def _read_checkpoints(self) -> bool:
        """No trace: the kept step files and ckpt.pt are what the run left (a run that is only
        starting has neither yet, and stays 'waiting')."""
        found = {scheme: self.folder.steps(scheme) for scheme in self.schemes}
        ckpts = [p.name for p in self.root.glob("ckpt*.pt")]
        if not any(found.values()) and not ckpts:
            return False
        changed = False
        for scheme, steps in found.items():
            kept = {step: self.folder.relative(path) for step, path in steps}
            changed |= kept != self.series[scheme].kept_steps
            self.series[scheme].kept_steps = kept
            self.step = max([self.step, *kept])
        note = (f"{self.folder.trace.name} is missing from this run folder: no curves, census or samples to show; "
                f"its {sum(map(len, found.values()))} kept steps and {', '.join(sorted(ckpts)) or 'no ckpt.pt'} "
                f"are read from the folder")
        changed |= note != self.note
        self.note = note
        if self.state == "waiting":
            self.state = "stopped" if ckpts else self.state
            self.end_message = "no trace"
        return changed

    # -- what the panel shows ------------------------------------------------------------------
    def corpus_label(self) -> str:
        """"pydoc topics, char": the corpus and tokenizer, as the status bar says them."""
        meta = self.meta or {}
        corpus = (meta.get("corpus") or {}).get("name") or "corpus"
        kind = (meta.get("tokenizer") or {}).get("kind") or ""
        return f"{corpus}, {kind}" if kind else str(corpus)

    def describe(self, state_word: str | None = None) -> str:
        """One line on the run: its state (the trace's, or `state_word` from whoever knows better:
        "paused" for a child stopped by a signal), step, corpus."""
        where = f"step {self.step:,} of {self.max_iters:,}" if self.max_iters else f"step {self.step:,}"
        tail = f" ({self.end_message})" if self.end_message and self.state != "done" else ""
        return f"{state_word or STATE_WORDS[self.state]}{tail} · {where} · {self.corpus_label()} · {self.root}"

    def ckpt_path(self, scheme: str) -> Path | None:
        """The scheme's latest full checkpoint (nanoGPT's ckpt.pt), None before the first eval wrote it."""
        if self.meta is None:
            return None
        name = (self.meta.get("checkpoints") or {}).get(scheme) or (
            "ckpt.pt" if len(self.schemes) <= 1 else f"ckpt-{scheme}.pt")
        path = self.root / name
        return path if path.is_file() else None


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
    from gptcore.io.user_dirs import user_dir

    return user_dir("data", "gpt-explorer") / "runs"


def new_run_dir(base: Path | None = None) -> Path:
    """A fresh, not yet existing run folder named by the time (…/runs/2026-12-02_05-10-33)."""
    base = Path(base) if base is not None else default_runs_dir()
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    path, n = base / stamp, 1
    while path.exists():
        n += 1
        path = base / f"{stamp}_{n}"
    return path
