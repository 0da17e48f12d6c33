"""Is the app responsive while it trains? Keystroke latency of the Attention panel and the
training's iterations per second, each alone and both at once (issue 22).

    python -m explorer.bench --train [--train-threads 1,2] [--tokens 32] [--edits 6] [--seconds 30]

What is measured, on the machine's cores as they are (the load average is printed):
- cli_it_s: `python -m gptcore.train` at the CPU recipe alone, as a terminal runs it (torch's
  default threads, OMP_WAIT_POLICY=PASSIVE as gptcore.train sets it), iterations per second
  from its own trace (train records over their time span, after the first few);
- idle keystroke_ms: explorer.benches.live's keystroke (key press -> every heatmap repainted) with no run;
- per child thread count (the app's policy is train_process.child_threads(): one fewer than the
  cores, at least 1): the same child started the way the Train panel starts it, with the
  keystrokes typed while it trains: keystroke_ms and the child's it/s over the same seconds.
Targets: keystroke ≤ 2× idle, it/s ≥ 0.8× the CLI's.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARMUP_STEPS = 5  # the first steps pay for imports and allocation


def start_child(out_dir: Path, threads: int | None, max_iters: int = 100_000) -> subprocess.Popen:
    """The training child with the panel's environment (threads None: as a terminal runs it)."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONUNBUFFERED="1")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    else:
        env.pop("OMP_NUM_THREADS", None)
    from explorer.runtime.train_process import train_command

    argv = [sys.executable, *train_command(str(out_dir), {"max_iters": max_iters})]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_child(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def train_times(out_dir: Path) -> list[tuple[int, float]]:
    """(step, time) of every train record written so far."""
    path = out_dir / "trace.jsonl"
    out = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "train":
                out.append((int(r["step"]), float(r["time"])))
    return out


def wait_steps(out_dir: Path, proc: subprocess.Popen, n: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while len(train_times(out_dir)) < n:
        if proc.poll() is not None:
            raise RuntimeError(f"the training child exited with status {proc.returncode} before step {n}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the training child did not reach step {n} in {timeout:.0f} s")
        time.sleep(0.2)


def rate_between(out_dir: Path, t0: float, t1: float) -> float:
    """Iterations per second of the train records stamped between t0 and t1 (Unix time)."""
    inside = [t for _step, t in train_times(out_dir) if t0 <= t <= t1]
    return (len(inside) - 1) / (inside[-1] - inside[0]) if len(inside) > 2 else float("nan")


def cli_rate(seconds: float) -> float:
    folder = Path(tempfile.mkdtemp(prefix="bench-train-"))
    proc = start_child(folder / "run", threads=None)
    try:
        wait_steps(folder / "run", proc, WARMUP_STEPS)
        t0 = time.time()
        time.sleep(seconds)
        return rate_between(folder / "run", t0, time.time())
    finally:
        stop_child(proc)
        shutil.rmtree(folder, ignore_errors=True)


def run(app, session, runner, tokens: int, edits: int, threads_list, seconds: float, bench_attention,
        say=print) -> dict:
    """`bench_attention` is explorer.benches.live's (passed in: the bench imports this module)."""
    out = {"cli_it_s": round(cli_rate(seconds), 2)}
    say(f"CLI alone (torch's default threads): {out['cli_it_s']} it/s")
    idle = bench_attention(app, session, runner, tokens, edits, recompute=False)
    out["idle_keystroke_ms"] = idle["keystroke_ms"]
    say(f"keystroke with no training: {idle['keystroke_ms']} ms ({tokens} tokens)")
    for threads in threads_list:
        folder = Path(tempfile.mkdtemp(prefix="bench-train-"))
        proc = start_child(folder / "run", threads=threads)
        try:
            wait_steps(folder / "run", proc, WARMUP_STEPS)
            t0 = time.time()
            busy = bench_attention(app, session, runner, tokens, edits, recompute=False)
            left = seconds - (time.time() - t0)
            if left > 0:  # the rate needs enough steps: keep the GUI idle in its event loop meanwhile
                app.processEvents()
                time.sleep(left)
            rate = rate_between(folder / "run", t0, time.time())
        finally:
            stop_child(proc)
            shutil.rmtree(folder, ignore_errors=True)
        row = {"threads": threads, "keystroke_ms": busy["keystroke_ms"], "it_s": round(rate, 2),
               "keystroke_ratio": round(busy["keystroke_ms"] / idle["keystroke_ms"], 2),
               "it_s_ratio": round(rate / out["cli_it_s"], 2)}
        out[f"child_{threads}"] = row
        ok = row["keystroke_ratio"] <= 2 and row["it_s_ratio"] >= 0.8
        say(f"child with {threads} thread(s): keystroke {row['keystroke_ms']} ms ({row['keystroke_ratio']}× idle), "
            f"{row['it_s']} it/s ({row['it_s_ratio']}× the CLI) — {'meets' if ok else 'misses'} ≤2× / ≥0.8×")
    return out
