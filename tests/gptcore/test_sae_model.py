"""SAEs on a model (issue 33): the metric definitions against hand-made cases and an oracle written
here, `sae_edit` against a hook written here, neurons as an identity dictionary, `train_sae`'s
harvest (memory and disk alike) and the refusals."""
import pytest
import torch
import torch.nn.functional as F

import gptcore
from gptcore import GPT, GPTConfig, SAE, SAEError, check_sae_fits, neuron_dictionary, sae_edit, sae_metrics, train_sae
from gptcore.interp.sae import harvest as harvest_module
from gptcore.interp.sae.metrics import explained_variance

CFG = GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16)
HOOK = "blocks.0.hook_resid_post"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return GPT(CFG, seed=0).eval()


def ids(n=6, T=12, seed=0):
    return torch.randint(CFG.vocab_size, (n, T), generator=torch.Generator().manual_seed(seed))


def random_sae(d=16, width=48, k=4, hook=HOOK, seed=0):
    gen = torch.Generator().manual_seed(seed)
    sae = SAE(d, width, k, hook=hook).requires_grad_(False)
    for p in sae.parameters():
        p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    return sae


def test_explained_variance_on_the_issue_example():
    x = torch.tensor([[2.0, 0.0], [0.0, 4.0]])
    x_hat = torch.tensor([[2.0, 1.0], [0.0, 3.0]])
    # mean (1, 2); sum ||x - mean||^2 = (1 + 4) + (1 + 4) = 10; sum ||x - x_hat||^2 = 2
    assert explained_variance(x, x_hat) == pytest.approx(0.8)


def test_sae_metrics_equal_an_oracle_written_here(model):
    sae = random_sae()
    batch = ids()

    def ce(logits):
        return float(F.cross_entropy(logits[:, :-1].reshape(-1, CFG.vocab_size), batch[:, 1:].reshape(-1)))

    with torch.no_grad():
        _, cache = model.run_with_cache(batch, names_filter=HOOK)
        x = cache[HOOK].reshape(-1, 16)
        f = sae.encode(x)
        x_hat = sae.decode(f)
        clean = ce(model(batch))
        with model.hooks([(HOOK, lambda a, hp: x_hat.reshape(a.shape))]):
            spliced = ce(model(batch))
        with model.hooks([(HOOK, lambda a, hp: torch.zeros_like(a))]):
            zero = ce(model(batch))
    m = sae_metrics(model, sae, batch)
    assert m.tokens == 72 and m["l0"] == pytest.approx(float((f > 0).sum(1).float().mean()))
    assert m.explained_variance == pytest.approx(1 - float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum()),
                                                 abs=1e-5)
    assert m.dead_fraction == pytest.approx(float(((f > 0).sum(0) == 0).float().mean()))
    assert (m.ce_clean, m.ce_sae, m.ce_zero) == pytest.approx((clean, spliced, zero), abs=1e-5)
    assert m.ce_loss_recovered == pytest.approx((zero - spliced) / (zero - clean), abs=1e-4)
    assert 0 < m.dead_fraction < 1 and m.l0 <= 4


def test_neurons_are_an_identity_dictionary(model):
    neurons = neuron_dictionary(model, 1)
    assert neurons.hook == "blocks.1.mlp.hook_post" and neurons.width == neurons.d_in == 64
    m = sae_metrics(model, neurons, ids())
    assert m.explained_variance == pytest.approx(1.0) and m.ce_loss_recovered == pytest.approx(1.0)
    with pytest.raises(SAEError, match="layers 0..1"):
        neuron_dictionary(model, 2)


def test_sae_edit_equals_a_hook_written_here_and_keeps_the_error_term(model):
    sae = random_sae()
    batch = ids(2, 10)
    edits = {3: 0.0, 11: 2.5}

    def oracle(a, hp):
        x = a.reshape(-1, 16)
        f = sae.encode(x)
        for i, v in edits.items():
            x = x + (v - f[:, i:i + 1]) * sae.W_dec[i]
        return x.reshape(a.shape)

    with torch.no_grad():
        with model.hooks([(HOOK, oracle)]):
            want = model(batch)
        with sae_edit(model, sae, edits):
            got = model(batch)
        plain = model(batch)
        f = sae.encode(model.run_with_cache(batch, names_filter=HOOK)[1][HOOK].reshape(-1, 16))
        silent = int(((f > 0).sum(0) == 0).nonzero()[0, 0])  # a latent that never fires on this batch
        with sae_edit(model, sae, {silent: 0.0}):  # ablating it changes nothing
            unchanged = model(batch)
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, plain, atol=1e-3)
    assert torch.allclose(unchanged, plain, atol=1e-6)  # the error term: not the SAE's reconstruction
    assert not model.hook_dict[HOOK].active


def test_sae_edit_leaves_no_hook_behind_on_an_exception_and_refuses_bad_edits(model):
    sae = random_sae()
    with pytest.raises(RuntimeError, match="boom"):
        with sae_edit(model, sae, {1: 1.0}):
            assert model.hook_dict[HOOK].active
            raise RuntimeError("boom")
    assert not any(hp.active for hp in model.hook_dict.values())
    for bad, words in (({48: 1.0}, "0..47"), ({1: float("nan")}, "finite"), ({}, "non-empty"), ({"a": 1}, "'a'")):
        with pytest.raises(SAEError, match=words):
            with sae_edit(model, sae, bad):
                pass
    assert not any(hp.active for hp in model.hook_dict.values())


def test_sae_edit_on_a_neuron_sets_that_neuron(model):
    neurons = neuron_dictionary(model, 0)
    seen = []
    with torch.no_grad(), sae_edit(model, neurons, {7: 3.0}):
        with model.hooks([("blocks.0.mlp.hook_post", lambda a, hp: seen.append(a.clone()))]):
            model(ids(1, 5))
    assert torch.allclose(seen[0][..., 7], torch.full((1, 5), 3.0))


def test_train_sae_sets_the_hook_and_harvests_the_same_rows_on_disk_as_in_memory(model, tmp_path, monkeypatch):
    batch = ids(20, 16)
    sae = train_sae(model, batch, HOOK, width=32, k=4, tokens=2048, batch=256)
    assert sae.hook == HOOK and sae.d_in == 16
    with harvest_module.harvest(model, batch, HOOK) as rows:
        in_memory = rows.clone()
    monkeypatch.setattr(harvest_module, "MEMORY_BYTES", 0)
    with harvest_module.harvest(model, batch, HOOK, cache_dir=tmp_path) as cache:
        assert type(cache).__name__ == "ActivationCache" and cache.path.parent.parent == tmp_path
        on_disk = cache.rows(torch.arange(len(in_memory)))
        some = torch.tensor([17, 3, 250, 3])
        assert torch.equal(cache.rows(some), on_disk[some])  # in the order asked
        folder = cache.path.parent
    assert torch.allclose(on_disk, in_memory, atol=1e-2 * float(in_memory.abs().max()))  # float16
    assert not folder.exists()  # removed with the block
    disk_sae = train_sae(model, batch, HOOK, width=32, k=4, tokens=2048, batch=256, cache_dir=tmp_path)
    assert disk_sae.d_in == 16 and list(tmp_path.iterdir()) == []


def test_unknown_hooks_and_misfit_saes_are_refused_by_name(model):
    with pytest.raises(SAEError) as info:
        train_sae(model, ids(), "blocks.0.hook_resid_psot", width=32, k=4, tokens=256, batch=64)
    assert "blocks.{i}.hook_resid_post" in str(info.value) and "i = 0..1" in str(info.value)
    with pytest.raises(SAEError, match="per pair of tokens"):
        train_sae(model, ids(), "blocks.0.attn.hook_pattern", width=32, k=4, tokens=256, batch=64)
    with pytest.raises(SAEError, match="reads 8 numbers per token.*has 16"):
        check_sae_fits(model, random_sae(d=8))
    with pytest.raises(SAEError, match="does not name the hook"):
        check_sae_fits(model, random_sae(hook=""))
    with pytest.raises(SAEError, match="block_size 16"):
        sae_metrics(model, random_sae(), ids(2, 17))
    with pytest.raises(SAEError, match="0..39"):
        sae_metrics(model, random_sae(), torch.full((2, 4), 40))
    check_sae_fits(model, random_sae())  # fits: no error


def test_the_names_are_public_at_the_package_top():
    for name in ("SAE", "fit_sae", "train_sae", "sae_metrics", "SAEMetrics", "sae_edit", "save_sae", "load_sae",
                 "check_sae_fits", "neuron_dictionary", "NeuronDictionary", "ActivationCache", "SAEError"):
        assert getattr(gptcore, name) is not None
