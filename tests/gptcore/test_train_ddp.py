"""The training command under torchrun: 2 gloo processes give one process's weights, rank 0 alone
writes; on CUDA, bf16 autocast by default (skipped without a GPU)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gptcore.training.checkpoint import read_checkpoint
from gptcore.training.run import RunFolder
from gptcore.training.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2",
        "--gradient_accumulation_steps=2", "--eval_iters=1", "--eval_interval=3", "--probe_interval=3",
        "--max_iters=6", "--warmup_iters=2", "--lr_decay_iters=40", "--dtype=float32"]


def _text(tmp_path) -> Path:
    rng = np.random.default_rng(1)
    path = tmp_path / "tiny.txt"
    path.write_text(" ".join(rng.choice(["to", "be", "or", "not", "that", "is", "the", "question"], 1500)))
    return path


def _run(cmd, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_two_gloo_processes_train_the_same_weights_as_one(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this Python")
    data = _text(tmp_path)
    two = _run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "gptcore.train", f"--data={data}",
                f"--out_dir={tmp_path / 'two'}", *TINY], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    one = _run([sys.executable, "-m", "gptcore.train", f"--data={data}", f"--out_dir={tmp_path / 'one'}", *TINY],
               tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]

    _, _, a = read_checkpoint(tmp_path / "two" / "ckpt.pt")
    _, _, b = read_checkpoint(tmp_path / "one" / "ckpt.pt")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-6, atol=1e-7)

    # rank 0 alone wrote: one start, each step once, the world size recorded
    records = read_trace(tmp_path / "two" / "trace.jsonl")
    assert [r["kind"] for r in records].count("start") == 1
    assert [r["step"] for r in records if r["kind"] == "train"] == list(range(6))
    assert records[0]["world_size"] == 2 and RunFolder(tmp_path / "two").read_meta()["world_size"] == 2
    losses = lambda rs: [r["loss"] for r in rs if r["kind"] == "train"]  # noqa: E731
    assert losses(records) == pytest.approx(losses(read_trace(tmp_path / "one" / "trace.jsonl")), rel=1e-6)


def test_an_accumulation_the_processes_cannot_share_is_refused_by_every_process(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this Python")
    done = _run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "gptcore.train", f"--data={_text(tmp_path)}",
                 f"--out_dir={tmp_path / 'odd'}", *TINY, "--gradient_accumulation_steps=3"], tmp_path)
    assert done.returncode != 0
    assert "gradient_accumulation_steps: 3 micro-steps cannot be shared by 2 processes" in done.stderr
    assert not (tmp_path / "odd").exists()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_run_trains_under_bf16_autocast_by_default(tmp_path):
    out = tmp_path / "cuda"
    no_dtype = [a for a in TINY if not a.startswith("--dtype")]
    done = _run([sys.executable, "-m", "gptcore.train", f"--data={_text(tmp_path)}", f"--out_dir={out}", *no_dtype,
                 "--device=cuda"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    assert RunFolder(out).read_meta()["dtype"] == expected
    records = read_trace(out / "trace.jsonl")
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert len(losses) == 6 and all(loss is not None and loss > 0 for loss in losses)
    assert records[-1]["kind"] == "done"
