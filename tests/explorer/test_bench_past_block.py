"""`python -m explorer.bench` past block_size (issue 23): the keys append (the prompt grows past the
window), the row reports the window actually read and the slowest key, and --crop-step 1 runs
the old exact crop. Timing values are not asserted (a shared machine moves them)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args) -> list[dict]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "explorer.benches.live", "--shape", "tiny", "--edits", "2",
                           "--new-tokens", "0", "--no-recompute", "--json", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.qt  # explorer.benches.live drives the window
def test_the_bench_types_past_block_size_with_slack_and_without():
    (slack,) = _bench("--tokens", "200")  # the tiny model's block is 128: slack step 16
    assert slack["tokens"] > 128 > slack["window"] > 128 - 16
    assert slack["tokens"] - slack["window"] == 80  # 200+ tokens -> 80 dropped (5 steps of 16)
    assert slack["worst_ms"] >= slack["keystroke_ms"] > 0
    (exact,) = _bench("--tokens", "200", "--crop-step", "1")
    assert exact["window"] == 128  # the old exact crop: always a full window
