"""compile=True: the model and its loss under torch.compile (training/compiled.py), checked against
the eager Trainer on the same weights and batches; probes between steps recompile nothing; a
compile that fails leaves one message and an eager run with the eager run's numbers. And where
compile is on by default (CUDA, as train.py) and where not (a CPU)."""
from __future__ import annotations

import logging

import pytest
import torch

from gptcore import GPT, GPTConfig
from gptcore.training import TrainConfig, TrainConfigError, Trainer

from test_training_core import NANO, batch_of, small_config  # the same tiny model, settings and batches

TC = small_config()  # 2 micro-batches of 3 rows a step, clipping on, float32


@pytest.fixture
def fresh_compiler():
    """Each test compiles from nothing (dynamo keeps graphs per code object, across tests)."""
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compile_is_on_by_default_on_cuda_only_and_follows_the_setting():
    assert TrainConfig().compile is None
    assert TrainConfig().compiles_on("cuda") and not TrainConfig().compiles_on("cpu")  # train.py's default; CPU: asked
    assert TrainConfig(compile=True).compiles_on("cpu") and not TrainConfig(compile=False).compiles_on("cuda")
    with pytest.raises(TrainConfigError, match="compile: must be True, False or None"):
        TrainConfig(compile="yes")
    assert not Trainer(GPT(GPTConfig(**NANO), seed=0), TC).compiled  # a CPU run stays eager


def test_compiled_steps_equal_eager_ones_and_a_probe_between_them_recompiles_nothing(tmp_path, monkeypatch,
                                                                                     one_torch_thread, fresh_compiler):
    """Inductor on this CPU: the same losses, gradient norms and weights as the eager Trainer (to
    float rounding: the compiled kernels sum in another order), with two micro-batches and
    clipping; then the recorder's probes (hooks on every attention pattern, eval mode, generation)
    run on the model between two steps, and the next compiled step runs without a recompile."""
    import torch._dynamo

    from gptcore.training.data import corpus_from_text
    from gptcore.training.recorder import Recorder
    from gptcore.training.run import RunFolder

    tc = small_config()
    eager = Trainer(GPT(GPTConfig(**NANO), seed=5), tc)
    compiled = Trainer(GPT(GPTConfig(**NANO), seed=5), tc.replace(compile=True))
    assert compiled.compiled and not eager.compiled
    for it in range(4):
        x, y = batch_of(it, TC)
        assert compiled.step(x, y) == pytest.approx(eager.step(x, y), abs=1e-5), f"step {it}"
        assert compiled.last_grad_norm == pytest.approx(eager.last_grad_norm, rel=1e-4)
    assert compiled.compiled and compiled.compile_failure is None  # it did run compiled

    corpus = corpus_from_text("the cat sat on the mat and the dog ran far away home. " * 60, "cat.txt", "char", "t")
    recorder = Recorder(RunFolder(tmp_path), corpus, NANO["block_size"], seed=1)
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)  # a recompile would raise (and fall back)
    record = recorder.probe(compiled.model, "gpt2", 4)
    assert record["attention"]["shape"] == [2, 2, 16, 16] and record["sample"]["text"]  # the hooks did fire
    assert not any(hp.active for hp in compiled.model.hook_dict.values())  # and are gone
    for it in range(4, 6):
        x, y = batch_of(it, TC)
        assert compiled.step(x, y) == pytest.approx(eager.step(x, y), abs=1e-5), f"step {it}"
    assert compiled.compiled and compiled.compile_failure is None  # no recompile, no fallback
    for (name, a), b in zip(compiled.model.state_dict().items(), eager.model.state_dict().values()):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)


def _failing_backend(where: str):
    """A torch.compile backend that fails the way a missing compiler does: at the forward graph,
    or (through AOTAutograd, which compiles the backward when it first runs) at the backward one."""
    from torch._dynamo.backends.common import aot_autograd

    def broken(graph, example_inputs):
        raise RuntimeError(f"no C++ compiler for the {where} graph (a stand-in failure)")

    def keep(graph, example_inputs):
        return graph

    if where == "forward":
        return broken
    return aot_autograd(fw_compiler=keep, bw_compiler=broken)


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_failed_compile_falls_back_to_eager_with_one_message_and_the_eager_numbers(monkeypatch, caplog, where,
                                                                                     fresh_compiler):
    import gptcore.training.compiled as compiled_module

    real_compile = torch.compile
    monkeypatch.setattr(compiled_module.torch, "compile",
                        lambda fn: real_compile(fn, backend=_failing_backend(where)))
    tc = small_config()
    eager = Trainer(GPT(GPTConfig(**{**NANO, "dropout": 0.1}), seed=7), tc)  # dropout: the retry redraws the same
    torch.manual_seed(3)
    eager_losses = [eager.step(*batch_of(it, TC)) for it in range(3)]
    trying = Trainer(GPT(GPTConfig(**{**NANO, "dropout": 0.1}), seed=7), tc.replace(compile=True))
    assert trying.compiled
    torch.manual_seed(3)
    with caplog.at_level(logging.WARNING, logger="gptcore.training.compiled"):
        losses = [trying.step(*batch_of(it, TC)) for it in range(3)]
    assert losses == eager_losses  # the failed step was redone eagerly from the same random state
    assert not trying.compiled
    assert f"no C++ compiler for the {where} graph" in trying.compile_failure
    assert "training goes on without it" in trying.compile_failure and "compile=False" in trying.compile_failure
    ours = [r.getMessage() for r in caplog.records if r.name == "gptcore.training.compiled"]
    assert ours == [trying.compile_failure]  # said once
    for (name, a), b in zip(trying.model.state_dict().items(), eager.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_run_with_a_failing_compile_says_so_in_its_trace_and_finishes(tmp_path, monkeypatch, fresh_compiler):
    import gptcore.training.compiled as compiled_module
    from gptcore.train import main
    from gptcore.training.trace import read_trace

    real_compile = torch.compile
    monkeypatch.setattr(compiled_module.torch, "compile", lambda fn: real_compile(fn, backend=_failing_backend("forward")))
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 200, encoding="utf-8")
    out = tmp_path / "run"
    assert main([f"--data={text}", f"--out_dir={out}", "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16",
                 "--batch_size=2", "--eval_iters=1", "--max_iters=3", "--probe_interval=0", "--warmup_iters=1",
                 "--lr_decay_iters=3", "--device=cpu", "--dtype=float32", "--compile=True"]) == 0
    records = read_trace(out / "trace.jsonl")
    said = [r["text"] for r in records if r["kind"] == "message" and "torch.compile failed" in r["text"]]
    assert len(said) == 1 and "stand-in failure" in said[0]
    assert [r["step"] for r in records if r["kind"] == "train"] == [0, 1, 2] and records[-1]["kind"] == "done"
