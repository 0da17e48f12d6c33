"""Transcoders and their trainer (issue 38): circuit-tracer's semantics with TopK, the hand-written
gradients against autograd, recovery of a known sparse map, determinism, warm start, progress,
cancel and refusals. Oracles are written here."""

import pytest
import torch

from gptcore import CircuitError, Transcoder, fit_transcoder
from gptcore.errors import Cancelled, UserError
from gptcore.interp.circuits.train_step import TranscoderTrainer
from gptcore.interp.circuits.fit import warm_start_lr

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CUDA_MARKS = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA_MARKS)]  # as test_sae_core.py's (this module is imported by
# tests/explorer as tests.gptcore.…, where test_sae_core is not importable by its bare name)


def random_transcoder(d=8, width=32, k=4, skip=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = Transcoder(d, width, k, layer=1, skip=skip)
    with torch.no_grad():
        for p in t.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return t.requires_grad_(False)


@pytest.mark.parametrize("skip", [True, False])
def test_encode_keeps_the_k_largest_relud_and_decode_adds_bias_and_skip(skip):
    t = random_transcoder(skip=skip)
    x = torch.randn(5, 8)
    pre = x @ t.W_enc + t.b_enc  # no input centring: circuit-tracer's x @ W_enc.T + b_enc, ours transposed
    f = t.encode(x)
    for row in range(5):
        top = set(pre[row].topk(4).indices.tolist())
        for j in range(32):
            want = max(float(pre[row, j]), 0.0) if j in top else 0.0
            assert float(f[row, j]) == pytest.approx(want, abs=1e-5)
    want = f @ t.W_dec + t.b_dec + (x @ t.W_skip if skip else 0)
    assert torch.allclose(t.decode(f, x), want, atol=1e-5)
    assert torch.allclose(t(x), want, atol=1e-4)  # the sparse forward = decode(encode)
    assert (t.input_hook, t.output_hook) == ("blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out")


def test_a_relu_transcoder_keeps_every_positive_pre_activation():
    t = random_transcoder(k=4)
    t.k = None
    x = torch.randn(6, 8)
    assert torch.allclose(t.encode(x), (x @ t.W_enc + t.b_enc).relu())
    assert torch.allclose(t(x), t.decode(t.encode(x), x), atol=1e-5)
    with pytest.raises(CircuitError, match="ReLU"):
        t.encode_topk(x)


def trainer(device, dtype=None, n_dead=0, skip=True, B=40, d=12, W=64, k=4, seed=2):
    """A transcoder trainer with random weights on `device` (drawn on the host: the same on every device),
    its first n_dead latents dead, and a batch x (B, d), y (B, d) there."""
    gen = torch.Generator().manual_seed(seed)
    dec = torch.randn(W, d, generator=gen)
    dec /= dec.norm(dim=1, keepdim=True)
    enc = torch.randn(W, d, generator=gen)
    skip_matrix = 0.1 * torch.randn(d, d, generator=gen) if skip else None
    tr = TranscoderTrainer(enc.to(device), torch.randn(W, generator=gen).to(device), dec.to(device),
                           0.1 * torch.randn(d, generator=gen), skip_matrix, k, 1e-3, dead_tokens=0, compute_dtype=dtype)
    tr.since_fired[:n_dead] = 1  # > dead_tokens: these are dead
    x, y = torch.randn(B, d, generator=gen), 2 * torch.randn(B, d, generator=gen) + 1
    return tr, x.to(device), y.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n_dead", [0, 3, 20, 40])  # none; all dead used; top-k_aux of many (dense or sparse form)
@pytest.mark.parametrize("skip", [True, False])
def test_the_hand_written_gradients_equal_autograd_on_every_device_and_product_dtype(device, dtype, n_dead, skip):
    """Oracle: the TopK recipe's loss by autograd through dense tensors. With bfloat16 products the
    pre-activations are the bfloat16 product's values (the top-k read from it), their gradient the
    float32 one (the cast is a rounding, not a function to differentiate), as test_sae_core.py's oracle."""
    tr, x, y = trainer(device, dtype, n_dead, skip)
    d, k = x.shape[1], tr.k
    params = [p.clone().requires_grad_() for p in tr.params]
    E, b_enc, D, b_dec = params[:4]
    exact = x @ E.T + b_enc  # (B, W): no input centring
    low = torch.addmm(tr.b_enc.to(dtype), x.to(dtype), tr.enc.to(dtype).t())  # what the step ranks
    pre = exact + (low.float() - exact).detach()
    idx = low.topk(k, dim=1, sorted=False).indices  # ranked as the step ranks (bfloat16 has ties)
    recon = (pre.gather(1, idx).relu()[:, :, None] * D[idx]).sum(1) + b_dec + (x @ params[4] if skip else 0)
    total = (y - y.mean(0)).pow(2).sum()
    e = y - recon
    loss = e.pow(2).sum() / total
    if n_dead:
        k_aux = min(d // 2, n_dead)
        aidx = low.index_select(1, torch.arange(n_dead, device=device)).topk(k_aux, dim=1, sorted=False).indices
        e_hat = (pre.gather(1, aidx).relu()[:, :, None] * D[aidx]).sum(1)
        loss = loss + min(n_dead / (d // 2), 1.0) * (e_hat - e.detach()).pow(2).sum() / total / 32
    loss.backward()
    radial = (D.grad * tr.W_dec).sum(1, keepdim=True) * tr.W_dec  # decoder rows stay unit: radial part removed
    want = [E.grad, b_enc.grad, D.grad - radial, b_dec.grad] + ([params[4].grad] if skip else [])
    seen = []
    tr.adam.step = lambda: seen.extend(p.grad.clone() for p in tr.params)
    fvu = tr.step(x, y)
    assert fvu.device.type == torch.device(device).type and fvu.dim() == 0  # read back only when wanted
    assert float(fvu) == pytest.approx(float(e.detach().pow(2).sum() / total), rel=1e-5)
    exact_inputs = dtype == torch.float32 or not n_dead  # AuxK's products run in `dtype` too: bfloat16's
    assert len(seen) == len(want)  # rounding of their inputs (2^-8 relative) then shows, in proportion to the gradient
    for got, ref in zip(seen, want):
        assert got.device == ref.device
        tol = dict(atol=1e-5, rtol=1e-4) if exact_inputs else dict(atol=1e-3 * float(ref.abs().max()), rtol=1e-3)
        assert torch.allclose(got, ref, **tol)


def sparse_map_data(n=30_000, d=32, n_true=48, k_true=2, seed=0):
    """x = a sparse non-negative code over n_true > d directions U; y = the same code through other
    directions V, plus a constant: not a linear function of x, but exactly a k_true-sparse transcoder."""
    gen = torch.Generator().manual_seed(seed)
    U = torch.randn(n_true, d, generator=gen)
    U /= U.norm(dim=1, keepdim=True)
    V = torch.randn(n_true, d, generator=gen)
    V /= V.norm(dim=1, keepdim=True)
    idx = torch.stack([torch.randperm(n_true, generator=gen)[:k_true] for _ in range(n)])
    code = torch.zeros(n, n_true).scatter_(1, idx, 1 + torch.rand(n, k_true, generator=gen))
    return code @ U, 2 * code @ V + 0.5, V


def held_out_fvu(t, x, y) -> float:
    with torch.no_grad():
        return float((t(x) - y).pow(2).sum() / (y - y.mean(0)).pow(2).sum())


def test_each_feature_starts_out_firing_on_the_same_share_of_the_inputs():
    """fit_transcoder's b_enc starts at minus each feature's (1 - 4 k/width) quantile of x @ W_enc over a
    sample (issue 39's equal start, sae/fit.py): the encoder reads x itself, not x - b_dec. Read back
    after one step at a learning rate of ~0."""
    from gptcore.interp.sae.fit import START_SHARE

    x, y, _ = sparse_map_data(n=10_000)
    t = fit_transcoder(x, y, width=96, k=2, tokens=1024, batch=1024, lr=1e-12)
    with torch.no_grad():
        unbiased = (x @ t.W_enc > 0).float().mean(0)  # (96,): b_enc = 0, as the recipe started before
        share = (x @ t.W_enc + t.b_enc > 0).float().mean(0)  # (96,)
    assert float(unbiased.max() - unbiased.min()) > 0.2  # random directions: shares from ~1/3 to ~2/3 of the rows
    want = START_SHARE * 2 / 96  # 0.083; the sample is 4,096 of the 10,000 rows
    assert 0.75 * want < float(share.min()) and float(share.max()) < 1.3 * want


def test_a_dead_feature_is_revived_while_revive_is_on_and_stays_dead_otherwise():
    """issue 39, shared with the SAE trainer: its b_enc is raised to where it would make the top k of
    its share of a batch."""
    fired = {}
    for revive in (False, True):
        tr, _x, _y = trainer("cpu", torch.float32, B=256)
        tr.b_enc[:5] = -100.0  # five features that can never win
        tr.since_fired[:5] = 1  # and have been silent past dead_tokens (0)
        tr.revive = revive
        gen = torch.Generator().manual_seed(4)
        for _ in range(3):
            tr.step(torch.randn(256, 12, generator=gen), 2 * torch.randn(256, 12, generator=gen))
        fired[revive] = int((tr.since_fired[:5] == 0).sum())
        assert float(tr.b_enc[:5].max()) > -10 if revive else float(tr.b_enc[:5].max()) < -99
    assert fired == {False: 0, True: 5}


def test_a_transcoder_recovers_a_known_sparse_map():
    x, y, V = sparse_map_data()
    t = fit_transcoder(x[:25_000], y[:25_000], width=96, k=2, tokens=300_000, batch=1024, lr=3e-3, seed=1, skip=False)
    assert held_out_fvu(t, x[25_000:], y[25_000:]) < 0.08
    # the true output directions are found as decoder rows: the features are the map's own
    cos = (V @ t.W_dec.T / t.W_dec.norm(dim=1)).max(1).values  # (n_true,)
    assert float((cos > 0.9).float().mean()) >= 0.9


def test_fitting_is_deterministic_and_the_seed_matters():
    x, y, _ = sparse_map_data(n=4000)
    a = fit_transcoder(x, y, width=32, k=3, tokens=8192, batch=512, lr=3e-3, seed=5)
    b = fit_transcoder(x, y, width=32, k=3, tokens=8192, batch=512, lr=3e-3, seed=5)
    c = fit_transcoder(x, y, width=32, k=3, tokens=8192, batch=512, lr=3e-3, seed=6)
    for name, p in a.named_parameters():
        assert torch.equal(p, dict(b.named_parameters())[name]), name
    assert not torch.equal(a.W_dec, c.W_dec)
    assert a.metadata["seed"] == 5 and a.metadata["training_tokens"] == 8192


def test_a_warm_start_reads_the_previous_transcoder_in_its_own_units():
    x, y, _ = sparse_map_data(n=4000)
    first = fit_transcoder(x, y, width=32, k=3, tokens=8192, batch=512, lr=3e-3)
    # one step at a learning rate of ~0: raw -> scaled -> raw gives the same transcoder back
    again = fit_transcoder(x, y, width=32, k=3, tokens=512, batch=512, lr=1e-12, init=first)
    for name, p in first.named_parameters():
        assert torch.allclose(p, dict(again.named_parameters())[name], atol=1e-5, rtol=1e-4), name
    with pytest.raises(CircuitError, match="same shape"):
        fit_transcoder(x, y, width=64, k=3, tokens=512, batch=512, init=first)


def test_a_warm_start_at_its_default_rate_keeps_a_fitted_transcoder_fitted():
    """At a fitted point Adam's fresh moments take ~lr steps in every weight: at the cold default rate the
    same data's re-fit diverged (variance unexplained 0.014 -> 44); warm_start_lr keeps it where it was."""
    x, y, _ = sparse_map_data(n=12_000)
    first = fit_transcoder(x[:10_000], y[:10_000], width=96, k=2, tokens=100_000, batch=1024, seed=1)
    again = fit_transcoder(x[:10_000], y[:10_000], width=96, k=2, tokens=100_000, batch=1024, seed=2, init=first)
    assert again.metadata["lr"] == warm_start_lr(96, 32) < first.metadata["lr"]
    before, after = held_out_fvu(first, x[10_000:], y[10_000:]), held_out_fvu(again, x[10_000:], y[10_000:])
    assert before < 0.05 and after < 1.5 * before
    assert float((again.W_dec * first.W_dec).detach().sum(1).mean()) > 0.95  # feature i is still feature i


def test_progress_counts_tokens_and_cancel_stops():
    x, y, _ = sparse_map_data(n=2000)
    seen = []
    fit_transcoder(x, y, width=32, k=3, tokens=4096, batch=512, lr=3e-3, layer=2,
                   progress=lambda done, total, msg: seen.append((done, total, msg)))
    assert seen[-1][:2] == (4096, 4096) and all(b[0] > a[0] for a, b in zip(seen, seen[1:]))
    assert "layer 2" in seen[-1][2]
    calls = []
    with pytest.raises(Cancelled):
        fit_transcoder(x, y, width=32, k=3, tokens=4096, batch=512, cancel=lambda: calls.append(1) or len(calls) > 2)


@pytest.mark.parametrize("kwargs, match", [
    (dict(width=32, k=32), "k=32"), (dict(width=0, k=1), "width"), (dict(width=32, k=None), "pass k"),
    (dict(width=32, k=3, layer=-1), "layer")])
def test_bad_settings_are_refused_by_name(kwargs, match):
    x, y, _ = sparse_map_data(n=600)
    with pytest.raises(CircuitError, match=match) as err:
        fit_transcoder(x, y, tokens=512, batch=512, **{"layer": 0, **kwargs})
    assert isinstance(err.value, UserError)


def test_inputs_and_targets_must_pair_row_for_row():
    x, y, _ = sparse_map_data(n=600)
    with pytest.raises(CircuitError, match="600 rows but targets 500"):
        fit_transcoder(x, y[:500], width=32, k=3, tokens=512, batch=512)
