"""The routes capture and information flow take on a GPU (issue 37), taken here on the CPU and
compared with the CPU's own routes: equal numbers, and no read back to the host while the forward
runs (a read makes the host wait for the device at every layer).

- capture: every layer's pattern kept during the forward and folded at once afterwards
  (incremental._fold_at_once), results brought over in one transfer (incremental.in_one_transfer);
- routes: shares gathered on the device and read back once at the end (flow._on_host), or per layer
  when they would not fit (flow.DEVICE_RESULT_BYTES).
"""
from __future__ import annotations

import random
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gptcore import ablate
from gptcore.interp import flow
from gptcore.interp.flow import information_flow
from gptcore.interp.flow_incremental import FlowState
from gptcore.interp.probes import incremental
from gptcore.interp.probes.attention import AttentionState, capture_attention
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT

CFG = GPTConfig(vocab_size=97, block_size=96, n_layer=3, n_head=4, n_embd=64)
CAPTURE_FIELDS = ("thumbnails", "bin_edges", "entropy", "prev_token", "first_token")


@pytest.fixture
def model():
    return GPT(CFG, seed=4).eval()


def _edits(seed: int = 0, steps: int = 25):
    """Prompts as typing makes them: appends, deletions, insertions (lengths past thumb_size too)."""
    rng = random.Random(seed)
    ids = [rng.randrange(97) for _ in range(6)]
    for _ in range(steps):
        yield list(ids)
        op = rng.choice(["append", "append", "delete", "insert"])
        if op == "append":
            ids += [rng.randrange(97) for _ in range(rng.randint(1, 9))]
        elif op == "delete" and len(ids) > 2:
            ids = ids[:-rng.randint(1, 2)]
        else:
            at = rng.randint(0, len(ids))
            ids = ids[:at] + [rng.randrange(97)] + ids[at:]


def _same_capture(a, b) -> None:
    for name in CAPTURE_FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.full.keys() == b.full.keys() and all(torch.equal(a.full[k], b.full[k]) for k in a.full)
    assert torch.equal(a.lens.top_ids, b.lens.top_ids) and torch.equal(a.lens.top_probs, b.lens.top_probs)
    assert a.meta == b.meta


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_capture_folded_after_the_forward_equals_folded_layer_by_layer(model, monkeypatch, dtype):
    model = model.to(dtype)
    settings = dict(full_layers=(1,), thumb_size=8)
    per_layer, at_once = AttentionState(model, **settings), AttentionState(model, **settings)
    for ids in _edits():
        want = per_layer.capture(ids)
        with monkeypatch.context() as m:
            m.setattr(incremental, "_fold_at_once", lambda device, nbytes: True)
            got = at_once.capture(ids)
        _same_capture(got, want)
    assert got.n_tokens > 8 and not got.exact  # pooled bins and merged fine widths were exercised


def test_results_in_one_transfer_are_copies_of_the_same_numbers():
    xs = [torch.randn(3, 4, 5), torch.randn(7), torch.randn(2, 2)]
    got = incremental.in_one_transfer(*xs)
    for a, b in zip(got, xs):
        assert a.shape == b.shape and torch.equal(a, b)
        assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()  # the state writes into b later


def _same_flow(a, b) -> None:
    for name in ("attn", "attn_residual", "mlp", "mlp_residual", "tokens"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.replaced_heads == b.replaced_heads


@pytest.mark.parametrize("budget", [flow.DEVICE_RESULT_BYTES, 0])  # kept to the end, or read per layer
def test_routes_gathered_on_the_device_equal_the_cpus(model, monkeypatch, budget):
    ids = [(7 * i + 3) % 97 for i in range(40)]
    want = information_flow(model, ids)
    with ablate(model, heads=[(1, 2)]):
        want_ablated = information_flow(model, ids)
    host_state, device_state = FlowState(model), FlowState(model)
    wanted = [host_state.flow(p) for p in _edits(1, 12)]
    monkeypatch.setattr(flow, "_on_host", lambda device: False)
    monkeypatch.setattr(flow, "DEVICE_RESULT_BYTES", budget)
    _same_flow(information_flow(model, ids), want)
    with ablate(model, heads=[(1, 2)]):
        got = information_flow(model, ids)
    _same_flow(got, want_ablated)
    assert got.replaced_heads == ((1, 2),)
    for prompt, w in zip(_edits(1, 12), wanted):  # typing: kept rows plus recomputed ones
        _same_flow(device_state.flow(prompt), w)


class _ScalarReads(TorchDispatchMode):
    """Ops that read a tensor's value back to the host: a scalar read, or a mask turned into indices
    (`x[mask]`, `x[mask] = v`: the positions must be known on the host to size the result)."""

    READS = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select")
    INDEXING = ("aten.index.", "aten.index_put")

    def __init__(self, log: list, inside: list):
        super().__init__()
        self.log, self.inside = log, inside

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if self.inside[0]:
            by_mask = name.startswith(self.INDEXING) and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ()))
            if name.startswith(self.READS) or by_mask:
                self.log.append(name)
        return func(*args, **(kwargs or {}))


@contextmanager
def host_reads_during_the_forward(model, log: list):
    """Log every read back to the host made while `model`'s forward runs (its hooks included)."""
    inside = [False]
    pre = model.register_forward_pre_hook(lambda *_: inside.__setitem__(0, True))
    post = model.register_forward_hook(lambda *_: inside.__setitem__(0, False))
    real = {name: getattr(torch.Tensor, name) for name in ("cpu", "numpy", "tolist", "item")}

    def watched(name):
        def method(self, *args, **kwargs):
            if inside[0]:
                log.append(f"Tensor.{name}")
            return real[name](self, *args, **kwargs)

        return method

    try:
        for name in real:
            setattr(torch.Tensor, name, watched(name))
        with _ScalarReads(log, inside):
            yield
    finally:
        for name, method in real.items():
            setattr(torch.Tensor, name, method)
        pre.remove()
        post.remove()


def test_the_watch_sees_a_hook_that_reads_back(model):
    log = []
    seen = []
    reading = {"a scalar": lambda x, _h: seen.append(float(x.sum())),
               "by a mask": lambda x, _h: seen.append(x[x.isnan()])}
    for how, expected in (("a scalar", "aten._local_scalar_dense.default"), ("by a mask", "aten.index.Tensor")):
        log.clear()
        with torch.no_grad(), host_reads_during_the_forward(model, log), model.hooks(
                [("blocks.0.hook_resid_post", reading[how])]):
            model(torch.tensor([[1, 2, 3]]))
        assert log == [expected], how


def test_no_read_back_while_the_forward_runs(model, monkeypatch):
    monkeypatch.setattr(incremental, "_fold_at_once", lambda device, nbytes: True)
    monkeypatch.setattr(flow, "_on_host", lambda device: False)
    ids = [(5 * i + 1) % 97 for i in range(40)]
    log = []
    with host_reads_during_the_forward(model, log):
        capture_attention(model, ids, full_layers=(2,), thumb_size=8)
        information_flow(model, ids)
        with ablate(model, heads=[(0, 1)]):
            information_flow(model, ids)
        state = FlowState(model)
        state.flow(ids[:30])
        state.flow(ids)  # the typing route, from a kept prefix
    assert log == []


class _Work(TorchDispatchMode):
    """Counts the ops that launch work (views and aliases only describe memory), inside and outside
    the model's forward."""

    def __init__(self, inside: list):
        super().__init__()
        self.inside, self.count = inside, {True: 0, False: 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func not in (torch.ops.aten.detach.default, torch.ops.aten.lift_fresh.default):
            self.count[self.inside[0]] += 1
        return func(*args, **(kwargs or {}))


def _work(model, run) -> dict:
    inside = [False]
    pre = model.register_forward_pre_hook(lambda *_: inside.__setitem__(0, True))
    post = model.register_forward_hook(lambda *_: inside.__setitem__(0, False))
    try:
        with _Work(inside) as work:
            run()
    finally:
        pre.remove()
        post.remove()
    return work.count


def test_on_an_accelerator_the_capture_adds_no_work_per_layer_to_the_forward(monkeypatch):
    """The launches a GPU pays for: the forward of a capture does what a forward computing the patterns
    does and no more; the folding after it is a fixed number of ops whatever the depth."""
    monkeypatch.setattr(incremental, "_fold_at_once", lambda device, nbytes: True)
    ids = [(5 * i + 1) % 97 for i in range(40)]
    after = []
    for n_layer in (3, 6):
        model = GPT(CFG.replace(n_layer=n_layer), seed=4).eval()
        listen = [(f"blocks.{l}.attn.hook_pattern", lambda p, _h: None) for l in range(n_layer)]

        def plain():  # the forward alone, on the pattern path (as HF's output_attentions runs)
            with torch.inference_mode(), model.hooks(listen):
                model(torch.tensor([ids]), logits=None)

        captured = _work(model, lambda: capture_attention(model, ids, full_layers=(1,), thumb_size=8))
        assert captured[True] == _work(model, plain)[True], n_layer
        after.append(captured[False])
    assert after[0] == after[1]  # folding 6 layers costs what folding 3 does
