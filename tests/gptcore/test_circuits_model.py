"""Transcoders trained on a model (issue 38): what the harvest reads is each MLP's input and output,
one transcoder per layer, the disk path equals the memory path, warm starts, progress, cancel, and
`transcoder_metrics` against the metrics computed here by hand."""
import pytest
import torch
import torch.nn.functional as F

from gptcore import CircuitError, GPTConfig, TranscodersDoNotFit, train_transcoders, transcoder_metrics
from gptcore.errors import Cancelled
from gptcore.interp.circuits import harvest as harvest_module
from gptcore.interp.circuits.harvest import harvest_mlps
from gptcore.interp.sae import harvest as sae_harvest
from gptcore.model.gpt import GPT

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CFG = GPTConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16)


def model_and_ids(S=40, seed=0):
    model = GPT(CFG, seed=seed).eval()
    ids = torch.randint(30, (S, 16), generator=torch.Generator().manual_seed(seed))
    return model, ids


def test_the_harvest_reads_every_mlps_input_and_output_in_order():
    model, ids = model_and_ids(S=5)
    harvest_module.TOKENS_PER_FORWARD, before = 32, harvest_module.TOKENS_PER_FORWARD  # several chunks
    try:
        with harvest_mlps(model, ids) as pairs:
            pairs = [(x.clone(), y.clone()) for x, y in pairs]
    finally:
        harvest_module.TOKENS_PER_FORWARD = before
    names = [f"blocks.{layer}.{hook}" for layer in range(2) for hook in ("ln2.hook_normalized", "hook_mlp_out")]
    _, cache = model.run_with_cache(ids, names_filter=names)  # one forward of all sequences
    assert len(pairs) == 2
    for layer, (x, y) in enumerate(pairs):  # equal up to a chunk's float rounding
        assert torch.allclose(x, cache[f"blocks.{layer}.ln2.hook_normalized"].reshape(-1, 16), atol=1e-6)
        assert torch.allclose(y, cache[f"blocks.{layer}.hook_mlp_out"].reshape(-1, 16), atol=1e-6)


def test_the_disk_cache_holds_the_same_rows(monkeypatch, tmp_path):
    model, ids = model_and_ids(S=4)
    with harvest_mlps(model, ids) as in_memory:
        want = [(x.clone(), y.clone()) for x, y in in_memory]
    monkeypatch.setattr(sae_harvest, "MEMORY_BYTES", 0)
    with harvest_mlps(model, ids, cache_dir=tmp_path) as on_disk:
        assert len(list(tmp_path.iterdir())) == 1
        rows = torch.arange(ids.numel())
        for (x, y), (cx, cy) in zip(want, on_disk):
            assert torch.allclose(cx.rows(rows), x, atol=2e-3, rtol=2e-3)  # float16 on disk
            assert torch.allclose(cy.rows(rows), y, atol=2e-3, rtol=2e-3)
    assert list(tmp_path.iterdir()) == []  # removed when the block ends


def test_train_transcoders_gives_one_per_layer_deterministically_with_progress():
    model, ids = model_and_ids()
    seen = []
    a = train_transcoders(model, ids, width=32, k=4, tokens=1024, batch=256, seed=3,
                          progress=lambda done, total, msg: seen.append((done, total, msg)))
    b = train_transcoders(model, ids, width=32, k=4, tokens=1024, batch=256, seed=3)
    assert [t.layer for t in a] == [0, 1] and all(t.width == 32 and t.k == 4 and t.skip for t in a)
    for ta, tb in zip(a, b):
        assert torch.equal(ta.W_enc, tb.W_enc) and torch.equal(ta.W_skip, tb.W_skip)
    reading = [s for s in seen if s[2].startswith("reading")]
    training = [s for s in seen if not s[2].startswith("reading")]
    assert reading[-1][:2] == (40, 40)
    assert training[-1][:2] == (2048, 2048) and all(s[1] == 2048 for s in training)
    assert all(b_[0] >= a_[0] for a_, b_ in zip(training, training[1:]))  # one count over both layers


def test_a_warm_start_uses_the_previous_set_and_checks_it():
    model, ids = model_and_ids()
    first = train_transcoders(model, ids, width=32, k=4, tokens=1024, batch=256)
    again = train_transcoders(model, ids, width=32, k=4, tokens=256, batch=256, lr=1e-12, init=first)
    for a, b in zip(first, again):
        assert torch.allclose(a.W_dec, b.W_dec, atol=1e-5) and torch.allclose(a.W_enc, b.W_enc, atol=1e-4, rtol=1e-4)
    with pytest.raises(CircuitError, match="init must be the 2 transcoders"):
        train_transcoders(model, ids, width=32, k=4, tokens=256, batch=256, init=first[:1])


def test_cancel_stops_reading_and_training():
    model, ids = model_and_ids()
    with pytest.raises(Cancelled):
        train_transcoders(model, ids, width=32, k=4, tokens=1024, batch=256, cancel=lambda: True)
    calls = []
    with pytest.raises(Cancelled):
        train_transcoders(model, ids, width=32, k=4, tokens=1024, batch=256,
                          cancel=lambda: calls.append(1) or len(calls) > 4)


def test_metrics_equal_a_brute_force_computation():
    model, ids = model_and_ids()
    ts = train_transcoders(model, ids, width=32, k=4, tokens=2048, batch=256)
    val = torch.randint(30, (12, 16), generator=torch.Generator().manual_seed(9))
    m = transcoder_metrics(model, ts, val)
    _, cache = model.run_with_cache(val)
    targets = val[:, 1:].reshape(-1)

    def ce(hooks):
        with torch.no_grad(), model.hooks(hooks):
            logits = model(val)
        return float(F.cross_entropy(logits[:, :-1].reshape(-1, 30), targets))

    for layer, t in enumerate(ts):
        x = cache[f"blocks.{layer}.ln2.hook_normalized"].reshape(-1, 16).double()
        y = cache[f"blocks.{layer}.hook_mlp_out"].reshape(-1, 16).double()
        with torch.no_grad():
            pred = t(x.float()).double()
        assert m.fvu[layer] == pytest.approx(float((y - pred).pow(2).sum() / (y - y.mean(0)).pow(2).sum()), rel=1e-4)
        acts = t.encode(x.float())
        assert m.l0[layer] == pytest.approx(float((acts > 0).sum(1).float().mean()))
        assert m.dead_fraction[layer] == pytest.approx(1 - float((acts > 0).any(0).float().mean()))
    inputs = {}
    replace = []
    for t in ts:
        replace += [(t.input_hook, lambda x, hp: inputs.__setitem__(hp.name, x)),
                    (t.output_hook, lambda y, hp, t=t: t(inputs[t.input_hook]))]
    zero = [(t.output_hook, lambda y, hp: torch.zeros_like(y)) for t in ts]
    clean, replaced, zeroed = ce([]), ce(replace), ce(zero)
    assert (m.ce_clean, m.ce_replaced, m.ce_zero) == pytest.approx((clean, replaced, zeroed), rel=1e-5)
    assert m.ce_loss_recovered == pytest.approx((zeroed - replaced) / (zeroed - clean), rel=1e-4)
    assert m.tokens == val.numel()


def test_metrics_refuse_transcoders_of_another_model():
    model, ids = model_and_ids()
    ts = train_transcoders(model, ids, width=32, k=4, tokens=256, batch=256)
    other = GPT(CFG.replace(n_layer=3), seed=0)
    with pytest.raises(TranscodersDoNotFit, match="2 transcoders but the model has 3 layers"):
        transcoder_metrics(other, ts, ids)
