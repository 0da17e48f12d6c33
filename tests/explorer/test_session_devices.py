"""A headless session on every device (issue 37): `Session` with its model on the device (CPU always,
CUDA where present, marked `cuda`) drives attention capture, streamed generation, attribution and
patching, routes, a feature SAE trained and clamped, a training run and a scrubbed step, and each
result equals the same call on a CPU session holding the same weights.

No Qt here (this module runs where PySide6 is not installed, as on a GPU machine's image) and no
GPT-2 tokenizer either: the model is a tiny character-level run trained in this process by
`gptcore.train` on the device, so the session reads its text with the run's own characters. On a
machine without CUDA only the CPU case runs, comparing the CPU with itself; `pytest -m cuda` on a
GPU machine runs the CUDA case.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.session.core import Session

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")])]
CORPUS = "the cat sat on the mat. the dog ran to the cat. a bird sat on the dog and the mat.\n" * 120
PROMPT = "the cat sat on the mat. the dog ran to"
CLEAN, CORRUPT = "the cat sat on the mat", "the dog sat on the mat"  # one word apart, same length in characters
RUN = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=4", "--max_iters=4",
       "--eval_interval=2", "--eval_iters=1", "--probe_interval=0", "--log_interval=1", "--warmup_iters=1",
       "--lr_decay_iters=4", "--dtype=float32", "--compile=False"]  # float32, eager: comparable across devices
SCHEME = "gpt2"


def _tolerance(device: str) -> dict:
    """CPU against CPU is exact up to summation order; a GPU's kernels round differently (and may run
    float32 products in TF32 where a training switched that on)."""
    return dict(rtol=1e-5, atol=1e-5) if device == "cpu" else dict(rtol=2e-3, atol=2e-3)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """device -> a run folder trained on that device, in this process (each trained once)."""
    from gptcore.train import main

    data = tmp_path_factory.mktemp("data") / "corpus.txt"
    data.write_text(CORPUS, encoding="utf-8")
    done = {}

    def run_on(device: str):
        if device not in done:
            root = tmp_path_factory.mktemp(f"run-{device}")
            assert main([f"--data={data}", f"--out_dir={root}", f"--device={device}", *RUN]) == 0
            done[device] = root
        return done[device]

    return run_on


@pytest.fixture(scope="module", params=DEVICES)
def pair(request, runs):
    """(device, session on it, CPU session): both show step 2 of the run trained on the device, the
    latest step first and then scrubbed back (the second show copies weights into the model in place)."""
    device = request.param
    root = runs(device)
    sessions = []
    for where in (device, "cpu"):
        session = Session(device=where)
        follower = session.training.open(root)
        assert follower.kept_steps(SCHEME) == [0, 2, 4]
        first = session.training.show_step(follower, SCHEME, 4)
        scrubbed = session.training.show_step(follower, SCHEME, 2)
        assert first.swapped and not scrubbed.swapped and session.info.run.step == 2
        sessions.append(session)
    return device, sessions[0], sessions[1]


def test_the_run_trained_on_the_device_as_on_the_cpu(runs, pair):
    from gptcore.training.trace import read_trace

    device = pair[0]

    def losses(root):
        return [r["loss"] for r in read_trace(root / "trace.jsonl") if r["kind"] == "train"]

    on_device, on_cpu = losses(runs(device)), losses(runs("cpu"))
    assert len(on_device) == len(on_cpu) == 4  # steps 0..3, each a finite loss
    np.testing.assert_allclose(on_device, on_cpu, rtol=1e-3 if device != "cpu" else 1e-6)


def test_the_scrubbed_step_is_on_the_device_with_the_files_weights(runs, pair):
    from gptcore.training.run import RunFolder

    device, session, _cpu = pair
    assert session.model.device.type == device and session.device.type == device
    want = RunFolder(runs(device)).load_step(SCHEME, 2, device="cpu").state_dict()
    got = session.model.state_dict()
    assert got.keys() == want.keys()
    for name, tensor in got.items():
        assert tensor.device.type == device
        assert torch.equal(tensor.cpu(), want[name]), name  # a copy of the file's numbers, not a recomputation


def test_attention_capture(pair):
    device, session, cpu = pair
    got, want = (s.attention.capture(PROMPT, full_layers=(1,), thumb_size=16) for s in (session, cpu))
    assert got.token_ids.tolist() == want.token_ids.tolist() and not got.exact  # pooled: thumbnails + a full layer
    for name in ("thumbnails", "entropy", "prev_token", "first_token", "lens_probs"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), **_tolerance(device), err_msg=name)
    np.testing.assert_allclose(got.full[1], want.full[1], **_tolerance(device))
    assert got.lens_ids[-1, 0] == want.lens_ids[-1, 0]


def test_streamed_generation(pair):
    device, session, cpu = pair
    ids = session.generation.context(PROMPT).ids
    settings = dict(max_new_tokens=12, temperature=0)  # greedy: the same tokens on every device
    got = [t.token for t in session.generation.stream(ids, settings)]
    want = [t.token for t in cpu.generation.stream(ids, settings)]
    assert got == want and len(got) == 12
    np.testing.assert_allclose(session.generation.next_token(PROMPT).logits, cpu.generation.next_token(PROMPT).logits,
                               **_tolerance(device))


def test_attribution_and_patching(pair):
    device, session, cpu = pair
    want = cpu.interp.attribution(PROMPT)
    got = session.interp.attribution(PROMPT, target=want.target.id, contrast=want.contrast.id)
    for name in ("heads", "attn", "mlps"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), **_tolerance(device), err_msg=name)
    tol = _tolerance(device)
    assert got.total == pytest.approx(want.total, rel=tol["rtol"], abs=tol["atol"])
    target, contrast = want.target.id, want.contrast.id
    got, want = (s.interp.patching(CLEAN, CORRUPT, target, contrast) for s in (session, cpu))
    for name in ("resid", "attn", "mlp", "heads"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), **_tolerance(device), err_msg=name)


def test_routes(pair):
    device, session, cpu = pair
    got, want = (s.routes.compute(PROMPT) for s in (session, cpu))
    for name in ("attn", "attn_residual", "mlp", "mlp_residual", "predicted_probs"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), **_tolerance(device), err_msg=name)
    assert got.predicted_ids.tolist() == want.predicted_ids.tolist()


def test_a_feature_sae_trained_on_the_models_device_and_clamped(pair):
    """The SAE is trained by the session on the device and sits there; the CPU session opens the very
    SAE it saved (same run, same step), so the clamp is compared on the same weights."""
    device, session, cpu = pair
    table = session.features.train(0, "resid", width=32, k=4, tokens=8192, corpus="run")
    sae = session.features._dictionary  # noqa: SLF001 - the installed dictionary: where it lives is the point
    assert sae.W_dec.device == session.model.device
    assert table.metrics and np.isfinite(list(table.metrics.values())).all()
    again = cpu.features.use("sae", 0, "resid", corpus="run")
    np.testing.assert_allclose(table.density, again.density, **_tolerance(device))
    feature = int(np.argmax(table.max_act))
    edits = {feature: 2.0 * float(table.max_act[feature])}
    for s in (session, cpu):
        assert s.features.edit(edits).active
    np.testing.assert_allclose(session.generation.next_token(PROMPT).logits, cpu.generation.next_token(PROMPT).logits,
                               **_tolerance(device))
    clamped = session.generation.next_token(PROMPT).logits
    session.interp.clear_ablation()
    assert np.abs(session.generation.next_token(PROMPT).logits - clamped).max() > 1e-4  # the clamp did something


def test_transcoders_trained_on_the_models_device_and_the_circuit_drawn_there(pair):
    """The Circuits panel's set is trained by the session on the device and opened there; the CPU session
    opens the very set it saved (same run, same step), so both graphs are of the same weights."""
    device, session, cpu = pair
    for s in (session, cpu):
        s.interp.clear_ablation()  # no edit held from an earlier test: both graphs are of the model itself
    tset = session.circuits.train(width=32, k=4, tokens=8192, corpus="run")
    _folder, _stamp, transcoders, _tset = session.circuits._set  # noqa: SLF001 - where the set in use lives is the point
    assert all(p.device == session.model.device for t in transcoders for p in t.parameters())
    assert tset.metrics and np.isfinite(tset.metrics["fvu"]).all()
    views = [s.circuits.graph(CLEAN, 0.8, 0.98) for s in (session, cpu)]  # within the 32-token context
    assert cpu.circuits.current_set().folder == tset.folder and views[0].n_nodes == views[1].n_nodes
    got, want = (s.circuits._graph.graph for s in (session, cpu))  # noqa: SLF001 - the full graphs, before pruning
    assert torch.equal(got.features, want.features) and torch.equal(got.logit_tokens, want.logit_tokens)
    scale = float(want.adjacency.abs().max())
    assert float((got.adjacency - want.adjacency).abs().max()) <= _tolerance(device)["atol"] * max(scale, 1.0)
    np.testing.assert_allclose(got.logit_probs, want.logit_probs, **_tolerance(device))
