"""The trace of a training run: an append-only JSON-lines file that a reader can follow while it grows.

Why a file and not a pipe or a socket: the run folder is the one interface between a training and
whoever watches it (the app's Train panel, a terminal, a cluster job writing to a shared disk), and
a file outlives both sides: a reader that starts late, or restarts, reads it again from the top.

Format (`DIR/trace.jsonl`, UTF-8, one JSON object per line, strict JSON: no NaN or Infinity — a
non-finite number is written as null):

    every record   "kind": one of KINDS; "time": Unix seconds (float); most also carry "step"
                   (counted from 0 at the run's start and continued by a resume; what it counts is
                   said per kind) and "scheme" (the init scheme the record is about).
    start          {"run": run id, "schemes": [...], "step": first step, "max_iters": n, "resumed": bool,
                    "world_size": n}
    train          {"scheme", "step": index of the optimizer step (0-based, run on the weights of step
                    "step"), "loss", "lr", "grad_norm": global norm before clipping, "grad_norms":
                    {"embed": .., "pos_embed": .., "blocks.0": .., ..., "ln_final": ..} per part,
                    "tokens_per_s", "dt": seconds of this scheme's step (CUDA: the GPU's, timed with
                    events), "memory_mb": the process's peak memory so far (CUDA: allocated on the GPU;
                    else resident set size)}; its "time" is when the step ended. One per step; on
                    CUDA those of up to log_interval steps are written together, at the log step (or
                    an eval, a probe, the end), since reading a step's figures makes the host wait
                    for the GPU (trainer.py's launch and collect)
    eval           {"scheme", "step": optimizer steps done (0 = the initialisation), "train": loss,
                    "val": loss}  (mean over eval_iters batches each; probe and checkpoint count alike)
    probe          {"scheme", "step", "census": {score name: [[layer][head]]}, "residual": {"labels",
                    "norms"}, "attention": {"file": path relative to DIR of a .npy (L, nh, T, T) float16,
                    "shape", "tokens": [T strings]}, "icl": {"score", "early", "late", "early_positions",
                    "late_positions", "loss_by_position": {"positions", "loss"}}, "routes": {"prompt", "position", "threshold",
                    "edges": [[src, dst, weight], ...] the strongest cross-token edges of the route to the
                    last token} or null, "sample": {"prompt",
                    "text"}, "seconds": cost of the probe, "notes": [why a part is null], only if any}
                   (recorder.py says how each is measured)
    checkpoint     {"scheme", "step", "path": the step's weights (relative to DIR), "latest": ckpt path}
    message        {"text"}: something a watcher should show (a warning, a refusal)
    diverged       {"scheme", "step", "message"}: that scheme's loss went non-finite; it stops, its last
                   checkpoint is kept, the other schemes go on (with one scheme the run ends with "error")
    done           {"step", "reason": "max_iters", "max_time" or "eval_only"}: the run finished
    stopped        {"step", "reason"}: SIGINT/SIGTERM; the latest checkpoint holds step "step"
    error          {"step", "message"}: the run failed (e.g. a non-finite loss) and says why

The last three end a run; a resume (`--init_from=resume`) appends a new "start" to the same file.
What the records mean for a run's state and series (for whoever watches it) is read in one place:
progress.py's `RunProgress`.

Each record is written with a single `write` of one whole line on a file opened for appending, so a
reader never sees two records interleaved; it may see the last line half written, which it leaves
for the next poll (`TraceReader` never returns a partial record).
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Iterator

KINDS = ("start", "train", "eval", "probe", "checkpoint", "message", "diverged", "done", "stopped", "error")
TERMINAL = ("done", "stopped", "error")


class TraceError(ValueError):
    """The trace cannot be read (missing, truncated, replaced, or a damaged line); the message says which."""


def clean(value):
    """`value` as strict JSON: non-finite floats become None, tuples lists, numpy/torch scalars numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return clean(value.tolist())
    raise TypeError(f"cannot write {type(value).__name__} to the trace; convert it to numbers or text first")


class TraceWriter:
    """Appends records to a trace. One process writes (rank 0); each record is one whole line.

    A line left half written by a killed run is cut off when the file is opened again (a resume),
    so the next record starts on a line of its own instead of gluing onto garbage."""

    def __init__(self, path):
        self.path = Path(path)
        self._drop_partial_tail()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _drop_partial_tail(self) -> None:
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            f.truncate(f.read().rfind(b"\n") + 1)

    def write(self, kind: str, **fields) -> dict:
        if kind not in KINDS:
            raise ValueError(f"unknown trace record kind {kind!r}; one of {', '.join(KINDS)}")
        record = clean({"kind": kind, "time": round(time.time(), 3), **fields})
        line = (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
        view = memoryview(line)
        while view:  # a regular file takes it in one write; loop in case it does not
            view = view[os.write(self._fd, view):]
        return record

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TraceReader:
    """Reads a trace as it grows: `poll()` returns the records completed since the last poll.

    It remembers where the last whole line ended; a half-written last line is read again next time.
    A trace that disappears, shrinks below what was read, or is replaced by another file raises
    TraceError (the records already returned stay valid). A damaged line raises TraceError naming
    it, after the good records before it have been returned."""

    def __init__(self, path):
        self.path = Path(path)
        self.offset = 0  # bytes of whole lines consumed
        self.line_no = 0  # lines consumed
        self._inode = None

    def poll(self) -> list[dict]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._inode is None:
                return []  # not written yet: a run that is starting
            raise TraceError(f"{self.path} was deleted while it was being followed; "
                             f"the run folder was removed or moved (open it again where it is now)") from None
        if self._inode is None:
            self._inode = (st.st_dev, st.st_ino)
        elif (st.st_dev, st.st_ino) != self._inode:
            raise TraceError(f"{self.path} was replaced by another file while it was being followed; "
                             f"open the run folder again to read the new trace")
        if st.st_size < self.offset:
            raise TraceError(f"{self.path} shrank from {self.offset:,} to {st.st_size:,} bytes while it was "
                             f"being followed (truncated or overwritten); open the run folder again")
        if st.st_size == self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        records: list[dict] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break  # a partial last line: wait for the rest
            record = self._parse(data[start:end])
            if isinstance(record, TraceError):
                if records:
                    return records  # show what was good; the next poll raises
                raise record
            records.append(record)
            self.offset += end + 1 - start
            self.line_no += 1
            start = end + 1
        return records

    def _parse(self, raw: bytes):
        where = f"{self.path}, line {self.line_no + 1}"
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return TraceError(f"{where} is not a JSON record ({exc}); the trace is damaged")
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            return TraceError(f"{where} is not a trace record (a JSON object with a \"kind\"); the trace is damaged")
        return record

    def follow(self, interval: float = 0.2, timeout: float | None = None, until_end: bool = True) -> Iterator[dict]:
        """Yield records as they are written; stop after a done/stopped/error record (`until_end`)
        or when `timeout` seconds pass without a new record."""
        quiet_since = time.monotonic()
        while True:
            records = self.poll()
            for record in records:
                yield record
                if until_end and record["kind"] in TERMINAL:
                    return
            if records:
                quiet_since = time.monotonic()
            elif timeout is not None and time.monotonic() - quiet_since > timeout:
                return
            else:
                time.sleep(interval)


def read_trace(path) -> list[dict]:
    """Every complete record of a trace (a partial last line is left out); TraceError if it is missing or damaged."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path} does not exist; a run folder holds trace.jsonl once its run has started")
    reader, records = TraceReader(path), []
    while batch := reader.poll():  # a damaged line: the poll after the good records raises
        records += batch
    return records


# -- `python -m gptcore.training.trace DIR`: follow a run from a terminal ---------------------------
def describe(record: dict) -> str | None:
    """One line for a record worth a line (train records only every 100 steps), else None."""
    kind, step, scheme = record["kind"], record.get("step"), record.get("scheme", "")
    if kind == "train":
        return None if step % 100 else f"step {step:>7}  {scheme}  loss {_num(record.get('loss'))}  lr {_num(record.get('lr'), '.2e')}"
    if kind == "eval":
        return f"step {step:>7}  {scheme}  eval  train {_num(record.get('train'))}  val {_num(record.get('val'))}"
    if kind == "probe":
        icl = (record.get("icl") or {}).get("score")
        sample = (record.get("sample") or {}).get("text", "")
        return f"step {step:>7}  {scheme}  probe  icl {_num(icl)}  sample {sample[:40]!r}"
    if kind == "checkpoint":
        return f"step {step:>7}  {scheme}  saved {record.get('path') or record.get('latest')}"
    fields = ", ".join(f"{k}={v}" for k, v in record.items() if k not in ("kind", "time"))
    return f"{kind}: {fields}"


def _num(value, fmt: str = ".4f") -> str:
    return "?" if value is None else format(value, fmt)


def main(argv=None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m gptcore.training.trace",
                                description="Follow a run folder's trace (a run on this machine or a shared disk).")
    p.add_argument("run_dir", help="the --out_dir of `python -m gptcore.train`")
    p.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    args = p.parse_args(argv)
    path = Path(args.run_dir) / "trace.jsonl"
    if not path.is_file():
        print(f"error: {path} does not exist; give the --out_dir of a run that has started", file=sys.stderr)
        return 2
    reader = TraceReader(path)
    records = reader.poll() if args.no_follow else reader.follow()
    try:
        for record in records:
            line = describe(record)
            if line:
                print(line, flush=True)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
