"""The SAE itself and its trainer (issue 33): SAELens's TopK semantics, the hand-written gradients
against autograd (on every device, in both product dtypes: issue 37), the published recipe's
pieces, determinism, cancel/progress and refusals. Oracles are written here."""
import pytest
import torch

from gptcore import SAE, SAEError, fit_sae
from gptcore.errors import Cancelled, UserError
from gptcore.interp.sae.topk_step import TopKTrainer


pytestmark = pytest.mark.usefixtures("one_torch_thread")
CUDA_MARKS = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA_MARKS)]  # test_sae_device.py uses them too


def random_sae(d=8, width=32, k=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    sae = SAE(d, width, k, hook="blocks.0.hook_resid_post")
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return sae


def test_encode_keeps_the_k_largest_relud_and_decode_is_affine():
    sae = random_sae()
    x = torch.randn(5, 8)
    sae.requires_grad_(False)
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc  # SAELens: hidden_pre on x - b_dec
    f = sae.encode(x)
    for row in range(5):
        top = set(pre[row].topk(4).indices.tolist())
        for j in range(32):
            want = max(float(pre[row, j]), 0.0) if j in top else 0.0
            assert float(f[row, j]) == pytest.approx(want, abs=1e-6)
    assert torch.allclose(sae.decode(f), f @ sae.W_dec + sae.b_dec, atol=1e-6)
    assert torch.allclose(sae(x), sae.decode(f), atol=1e-5)  # forward = decode(encode) (sparse path)
    values, indices = sae.encode_topk(x[None])  # any leading shape
    assert values.shape == (1, 5, 4) and torch.allclose(f.gather(1, indices[0]), values[0])


def test_feature_acts_and_directions_read_single_latents():
    sae = random_sae()
    x = torch.randn(6, 8)
    feats = torch.tensor([3, 17, 30])
    assert torch.allclose(sae.feature_acts(x, feats), sae.encode(x)[:, feats], atol=1e-6)
    assert torch.equal(sae.directions(feats), sae.W_dec[feats])


def unit_rows(width, d, gen):
    dec = torch.randn(width, d, generator=gen)
    return dec / dec.norm(dim=1, keepdim=True)


def trainer(device, dtype=None, n_dead=0, B=48, d=16, W=96, k=4, seed=1):
    """A trainer with random weights on `device` (drawn on the host: the same on every device), its
    first n_dead latents dead, and a batch x (B, d) there."""
    gen = torch.Generator().manual_seed(seed)
    tr = TopKTrainer(unit_rows(W, d, gen).to(device), 0.1 * torch.randn(d, generator=gen), k, 1e-3, dead_tokens=0,
                     compute_dtype=dtype)
    tr.enc += 0.1 * torch.randn(W, d, generator=gen).to(device)
    tr.b_enc += torch.randn(W, generator=gen).to(device)
    tr.since_fired[:n_dead] = 1  # > dead_tokens: these are dead
    return tr, (3 * torch.randn(B, d, generator=gen)).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n_dead", [0, 3, 20, 40])  # none; all dead used; top-k_aux of many (dense or sparse form)
def test_the_step_equals_autograd_on_every_device_and_product_dtype(device, dtype, n_dead):
    """Oracle: sparsify's loss by autograd through dense tensors. With bfloat16 products the
    pre-activations are the bfloat16 product's values (the top-k read from it), their gradient the
    float32 one (the cast is a rounding, not a function the loss should differentiate). The top-k is
    taken by the same call as the step's, so that bfloat16's ties break alike (dead latents are the
    first n_dead: their columns in order)."""
    tr, x = trainer(device, dtype, n_dead)
    d, k = x.shape[1], tr.k
    enc, b_enc, W_dec, b_dec = (t.clone().requires_grad_() for t in (tr.enc, tr.b_enc, tr.W_dec, tr.b_dec))
    exact = (x - b_dec) @ enc.T + b_enc  # (B, W)
    low = torch.addmm(tr.b_enc.to(dtype), (x - tr.b_dec).to(dtype), tr.enc.to(dtype).t())  # what the step ranks
    pre = exact + (low.float() - exact).detach()
    idx = low.topk(k, dim=1, sorted=False).indices  # ranked as the step ranks (bfloat16 has ties)
    vals = pre.gather(1, idx)
    recon = (vals.relu()[:, :, None] * W_dec[idx]).sum(1) + b_dec
    total = (x - x.mean(0)).pow(2).sum()
    e = x - recon
    loss = e.pow(2).sum() / total
    if n_dead:
        k_aux = min(d // 2, n_dead)
        aidx = low.index_select(1, torch.arange(n_dead, device=device)).topk(k_aux, dim=1, sorted=False).indices
        e_hat = (pre.gather(1, aidx).relu()[:, :, None] * W_dec[aidx]).sum(1)
        loss = loss + min(n_dead / (d // 2), 1.0) * (e_hat - e.detach()).pow(2).sum() / total / 32
    loss.backward()
    want_dec = W_dec.grad - (W_dec.grad * W_dec).sum(1, keepdim=True) * W_dec  # parallel part removed
    seen = {}
    tr.adam.step = lambda: seen.update({n: p.grad.clone() for n, p in zip("enc b_enc dec b_dec".split(), tr.params)})
    fvu = tr.step(x)
    assert fvu.device.type == torch.device(device).type and fvu.dim() == 0  # read back only when wanted
    assert float(fvu) == pytest.approx(float(e.detach().pow(2).sum() / total), rel=1e-5)
    # AuxK's products run in `dtype` too: its gradients are as exact as that dtype's inputs
    tol = dict(atol=1e-6, rtol=1e-4) if dtype == torch.float32 or not n_dead else dict(atol=3e-5, rtol=1e-3)
    for name, want in (("enc", enc.grad), ("b_enc", b_enc.grad), ("dec", want_dec), ("b_dec", b_dec.grad)):
        assert seen[name].device == want.device
        assert torch.allclose(seen[name], want, **tol), name


def test_a_step_keeps_decoder_rows_unit_norm_and_counts_firing():
    gen = torch.Generator().manual_seed(0)
    dec = torch.randn(64, 8, generator=gen)
    dec /= dec.norm(dim=1, keepdim=True)
    tr = TopKTrainer(dec, torch.zeros(8), 2, 1e-2, dead_tokens=100)
    tr.step(torch.randn(32, 8, generator=gen))
    assert torch.allclose(tr.W_dec.norm(dim=1), torch.ones(64), atol=1e-5)
    fired = tr.since_fired == 0
    assert 0 < int(fired.sum()) <= 64 and set(tr.since_fired.unique().tolist()) <= {0, 32}


def test_a_dead_latent_is_revived_while_revive_is_on_and_stays_dead_otherwise():
    """issue 39: its b_enc is raised to where it would make the top k of its share of a batch."""
    fired = {}
    for revive in (False, True):
        tr, x = trainer("cpu", torch.float32, B=256)
        tr.b_enc[:5] = -100.0  # five latents that can never win
        tr.since_fired[:5] = 1  # and have been silent past dead_tokens (0)
        tr.revive = revive
        gen = torch.Generator().manual_seed(4)
        for _ in range(3):
            tr.step(3 * torch.randn(256, 16, generator=gen))
        fired[revive] = int((tr.since_fired[:5] == 0).sum())
        assert float(tr.b_enc[:5].max()) > -10 if revive else float(tr.b_enc[:5].max()) < -99
    assert fired == {False: 0, True: 5}


def test_each_latent_starts_out_firing_on_the_same_share_of_the_rows():
    """issue 39: b_enc = minus each latent's (1 - 4 k/width) quantile of its pre-activation on a sample."""
    from gptcore.interp.sae import fit
    from gptcore.interp.sae.sources import as_source

    x = data(n=2000)
    tr, _ = trainer("cpu", torch.float32, W=96, k=4)
    source = as_source(x)
    fit._equal_start(tr, source, 0.05, 4, torch.Generator().manual_seed(0))
    sample = source.rows(torch.randint(2000, (2000,), generator=torch.Generator().manual_seed(0))) * 0.05
    pre = (sample - tr.b_dec) @ tr.enc.T  # (2000, 96)
    spread = (pre > 0).sum(0)
    assert int(spread.max() - spread.min()) > 300  # with b_enc = 0 the shares differ widely
    on = (pre + tr.b_enc > 0).sum(0)  # (96,) rows where each latent would be positive
    share = round(2000 * 4 * fit.START_SHARE / 96)  # 333; fewer where the sample drew a row twice (with replacement)
    assert int(on.max()) == share and int(on.min()) >= share - 3


def data(n=4000, d=16, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return 5.0 + 20.0 * torch.randn(n, d, generator=gen)  # far from unit scale: the fold must undo it


def test_fit_returns_an_sae_on_raw_activations_with_unit_decoder_rows():
    x = data()
    sae = fit_sae(x, width=64, k=8, tokens=40_000, batch=1000, hook="h")
    assert sae.hook == "h" and (sae.d_in, sae.width, sae.k) == (16, 64, 8)
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(64), atol=1e-4)
    with torch.no_grad():
        ev = 1 - float((x - sae(x)).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
    assert ev > 0.7  # reconstructs x in its own units (a missing fold would reconstruct x * scale)
    assert sae.metadata["training_tokens"] == 40_000 and sae.metadata["seed"] == 0


def test_same_seed_same_sae_other_seed_another():
    x = data()
    a, b = (fit_sae(x, width=32, k=4, tokens=8000, batch=1000, seed=5) for _ in range(2))
    c = fit_sae(x, width=32, k=4, tokens=8000, batch=1000, seed=6)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert not torch.equal(a.W_dec, c.W_dec)


def test_progress_counts_tokens_and_cancel_stops_with_cancelled():
    seen = []
    fit_sae(data(), width=32, k=4, tokens=5000, batch=1000, progress=lambda *a: seen.append(a))
    assert seen[-1][:2] == (5000, 5000) and all(total == 5000 for _, total, _ in seen)
    assert [done for done, _, _ in seen] == sorted(done for done, _, _ in seen)
    calls = []
    with pytest.raises(Cancelled):
        fit_sae(data(), width=32, k=4, tokens=50_000, batch=1000, cancel=lambda: calls.append(1) or len(calls) > 3)
    assert len(calls) == 4


@pytest.mark.parametrize("kwargs, words", [
    (dict(width=8, k=8), ["k=8", "width=8"]),
    (dict(width=8, k=0), ["k must be a positive integer"]),
    (dict(width=32, k=4, tokens=100), ["fewer than one batch", "4,096"]),
    (dict(width=32, k=4, batch=0), ["batch must be a positive integer"]),
])
def test_bad_settings_are_refused_by_name(kwargs, words):
    settings = dict(tokens=10_000) | kwargs
    with pytest.raises(SAEError) as info:
        fit_sae(data(), **settings)
    assert isinstance(info.value, UserError)
    for word in words:
        assert word in str(info.value)


def test_nan_or_inf_activations_and_bad_shapes_are_refused():
    x = data()
    x[123, 4] = float("nan")
    with pytest.raises(SAEError, match="NaN or inf.*row 123"):
        fit_sae(x, width=32, k=4, tokens=4096)
    x[123, 4] = float("inf")
    with pytest.raises(SAEError, match="NaN or inf"):
        fit_sae(x, width=32, k=4, tokens=4096)
    with pytest.raises(SAEError, match="flatten"):
        fit_sae(torch.randn(2, 3, 4), width=32, k=4, tokens=4096)
    with pytest.raises(SAEError, match="zero"):
        fit_sae(torch.zeros(100, 4), width=32, k=4, tokens=4096)


def test_a_warm_start_keeps_each_feature_where_it_was_and_a_cold_one_does_not():
    """fit_sae(init=…) (issue 33's features over training, after SAE-Track): the next step's SAE starts
    from this one, so feature i stays feature i; a fresh fit numbers its features anew."""
    x = data()
    first = fit_sae(x, width=64, k=8, tokens=40_000, batch=1000, hook="h")
    shifted = x + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(9))  # the next checkpoint
    warm = fit_sae(shifted, width=64, k=8, tokens=8000, batch=1000, hook="h", init=first)
    cold = fit_sae(shifted, width=64, k=8, tokens=8000, batch=1000, hook="h", seed=3)
    same_index = lambda a, b: float((a.W_dec * b.W_dec).sum(1).mean().detach())  # noqa: E731 - mean cos, row i with row i
    assert same_index(first, warm) > 0.9 and same_index(first, cold) < 0.5
    with torch.no_grad():
        ev = 1 - float((shifted - warm(shifted)).pow(2).sum() / (shifted - shifted.mean(0)).pow(2).sum())
    assert ev > 0.6  # and it still reconstructs the new activations
    with pytest.raises(SAEError, match="same shape"):
        fit_sae(x, width=32, k=8, tokens=8000, batch=1000, init=first)
