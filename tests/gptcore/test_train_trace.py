"""The trace format: strict JSON lines written whole, and a reader that follows a growing file."""
from __future__ import annotations

import json
import math
import os
import threading
import time

import pytest

from gptcore.training.trace import TraceError, TraceReader, TraceWriter, clean, read_trace


def test_records_are_strict_json_lines_and_non_finite_becomes_null(tmp_path):
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        w.write("train", scheme="gpt2", step=0, loss=float("nan"), lr=1e-3, grad_norms={"block 0": math.inf})
        w.write("done", step=0)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0], parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert first["kind"] == "train" and first["loss"] is None and first["grad_norms"]["block 0"] is None
    assert first["lr"] == 1e-3 and isinstance(first["time"], float)


def test_clean_converts_numpy_and_tuples_and_refuses_objects():
    np = pytest.importorskip("numpy")
    assert clean({"a": (1, np.float32(2.5)), "b": np.arange(3)}) == {"a": [1, 2.5], "b": [0, 1, 2]}
    with pytest.raises(TypeError, match="cannot write object"):
        clean(object())


def test_unknown_kind_is_refused(tmp_path):
    with TraceWriter(tmp_path / "t.jsonl") as w, pytest.raises(ValueError, match="unknown trace record kind"):
        w.write("trian", step=1)


def test_reader_returns_only_new_whole_lines_and_waits_for_a_partial_one(tmp_path):
    path = tmp_path / "trace.jsonl"
    reader = TraceReader(path)
    assert reader.poll() == []  # not there yet: a run that is starting
    w = TraceWriter(path)
    w.write("start", step=0)
    assert [r["kind"] for r in reader.poll()] == ["start"]
    assert reader.poll() == []
    with open(path, "ab") as f:  # a writer caught half way through a line
        f.write(b'{"kind":"train","step":1,"lo')
    assert reader.poll() == []
    with open(path, "ab") as f:
        f.write(b'ss":2.5}\n')
    got = reader.poll()
    assert got == [{"kind": "train", "step": 1, "loss": 2.5}]
    w.close()


def test_writer_reopened_after_a_crash_drops_the_half_line(tmp_path):
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        w.write("start", step=0)
    with open(path, "ab") as f:
        f.write(b'{"kind":"train","st')  # killed mid-write
    with TraceWriter(path) as w:
        w.write("start", step=5, resumed=True)
    assert [(r["kind"], r["step"]) for r in read_trace(path)] == [("start", 0), ("start", 5)]


def test_reader_says_when_the_trace_is_deleted_truncated_or_replaced(tmp_path):
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        w.write("start", step=0)
        w.write("train", step=0, loss=3.0)
    reader = TraceReader(path)
    assert len(reader.poll()) == 2
    path.write_text('{"kind":"start"}\n')  # same inode, fewer bytes
    with pytest.raises(TraceError, match="shrank"):
        reader.poll()

    reader = TraceReader(path)
    reader.poll()
    other = tmp_path / "other.jsonl"
    other.write_text('{"kind":"start"}\n{"kind":"start"}\n')
    os.replace(other, path)
    with pytest.raises(TraceError, match="replaced"):
        reader.poll()

    path.unlink()
    with pytest.raises(TraceError, match="deleted"):
        reader.poll()


def test_a_damaged_line_is_named_after_the_good_records_are_returned(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b'{"kind":"start","step":0}\nnot json at all\n{"kind":"done"}\n')
    reader = TraceReader(path)
    assert [r["kind"] for r in reader.poll()] == ["start"]
    with pytest.raises(TraceError, match=r"line 2 is not a JSON record"):
        reader.poll()
    with pytest.raises(TraceError, match="line 2"):
        read_trace(path)
    path.write_bytes(b'[1, 2]\n')
    with pytest.raises(TraceError, match="not a trace record"):
        read_trace(path)


def test_follow_stops_at_the_end_of_the_run(tmp_path):
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as w:
        w.write("start", step=0)
        w.write("stopped", step=3, reason="SIGINT")
        w.write("start", step=3, resumed=True)
    kinds = [r["kind"] for r in TraceReader(path).follow(interval=0.01, timeout=5)]
    assert kinds == ["start", "stopped"]
    assert [r["kind"] for r in TraceReader(path).follow(interval=0.01, timeout=0.05, until_end=False)] == \
        ["start", "stopped", "start"]


def test_read_trace_of_a_missing_file_says_what_a_run_folder_holds(tmp_path):
    with pytest.raises(TraceError, match="trace.jsonl once its run has started"):
        read_trace(tmp_path / "trace.jsonl")


def test_a_reader_follows_a_trace_while_another_thread_writes_it(tmp_path):
    path = tmp_path / "trace.jsonl"
    written = threading.Event()

    def run():
        with TraceWriter(path) as w:
            w.write("start", step=0)
            for step in range(20):
                w.write("train", step=step, loss=1.0 / (step + 1))
                time.sleep(0.01)
            w.write("done", step=20)
        written.set()

    writer = threading.Thread(target=run)
    reader = TraceReader(path)
    writer.start()
    got, during = [], 0
    for record in reader.follow(interval=0.005, timeout=30):
        got.append(record)
        during += not written.is_set()
    writer.join()
    assert [r["kind"] for r in got] == ["start", *["train"] * 20, "done"]
    assert [r["step"] for r in got if r["kind"] == "train"] == list(range(20))
    assert during > 1  # records were read while the file was still growing


def test_icl_positions_scale_with_the_context():
    from gptcore.training.recorder import icl_positions

    early, late = icl_positions(64)
    assert list(early) == list(range(3, 10)) and list(late) == list(range(56, 64))
    early, late = icl_positions(1024)
    assert early.start < 102 < early.stop and late.stop == 1024 and len(late) == 128
    assert icl_positions(7) == (range(0), range(0))


def test_the_terminal_follower_prints_evals_probes_and_the_end(tmp_path, capsys):
    from gptcore.training.trace import main

    with TraceWriter(tmp_path / "trace.jsonl") as w:
        w.write("start", step=0, schemes=["gpt2"])
        for step in range(201):
            w.write("train", scheme="gpt2", step=step, loss=2.0, lr=1e-3)
        w.write("eval", scheme="gpt2", step=201, train=1.9, val=float("nan"))
        w.write("probe", scheme="gpt2", step=201, icl={"score": -0.25}, sample={"text": "hello"})
        w.write("done", step=201, reason="max_iters")
    assert main([str(tmp_path)]) == 0  # follows until the run's end record
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("step")] == ["0", "100", "200", "201", "201"]
    assert "val ?" in lines[-3] and "icl -0.2500" in lines[-2] and lines[-1] == "done: step=201, reason=max_iters"
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "give the --out_dir of a run" in capsys.readouterr().err


def test_the_icl_score_is_late_loss_minus_early_loss(tmp_path):
    """A stand-in model that predicts the second half of every window perfectly and knows nothing in
    the first half: the score is the late loss (about 0) minus the early loss (log V), negative."""
    import numpy as np
    import torch

    from gptcore.training.data import corpus_from_text
    from gptcore.training.recorder import Recorder
    from gptcore.training.run import RunFolder

    rng = np.random.default_rng(0)
    corpus = corpus_from_text("".join(rng.choice(list("abcdefgh"), 4000)), "letters", "char", "test")
    recorder = Recorder(RunFolder(tmp_path), corpus, block_size=64, seed=0)
    V = corpus.vocab_size

    class KnowsTheLateHalf(torch.nn.Module):
        def forward(self, x):  # (R, T) -> (R, T, V)
            logits = torch.zeros(*x.shape, V)
            logits[:, 32:] = 30.0 * torch.nn.functional.one_hot(recorder.icl_y[:, 32:], V)
            return logits

    icl = recorder._icl(KnowsTheLateHalf(), "cpu")
    assert icl["early"] == pytest.approx(math.log(V), abs=1e-3) and icl["late"] == pytest.approx(0.0, abs=1e-3)
    assert icl["score"] == pytest.approx(-math.log(V), abs=1e-3)
    assert icl["windows"] == 64 and len(icl["loss_by_position"]["loss"]) == 64
