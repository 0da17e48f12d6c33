"""SAEs train on the device where the activations or the model are (issue 37): every test runs on
the CPU and, where torch sees a GPU, on CUDA (marked `cuda`). A few steps on a device equal the same
steps on the CPU (the step against autograd on every device and product dtype is in
test_sae_core.py); `fit_sae` and `train_sae` return the SAE on the training device, from rows
there, on the host or in the disk cache alike; on CUDA a step asks the host nothing."""
import math

import pytest
import torch

from gptcore import GPT, GPTConfig, SAEError, fit_sae, train_sae
from gptcore.interp.sae import harvest as harvest_module
from gptcore.interp.sae import sources
from test_sae_core import CUDA_MARKS, DEVICES, trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("device", DEVICES)
def test_steps_on_a_device_equal_the_same_steps_on_the_cpu(device):
    """Same weights and batches; float32 products on both (the device's own dtype is checked
    against autograd in test_sae_core.py): the device changes nothing but where the numbers are."""
    trainers = {}
    for where in ("cpu", device):
        tr, _x = trainer(where, torch.float32, n_dead=20, B=64, d=16, W=96, k=4)
        tr.dead_every = 2  # the dead set is read again mid-run, as fit_sae does
        gen = torch.Generator().manual_seed(7)
        for _ in range(5):
            tr.step((2 * torch.randn(64, 16, generator=gen)).to(where))
        trainers[where] = tr
    cpu, dev = trainers["cpu"], trainers[device]
    for name in ("enc", "b_enc", "W_dec", "b_dec", "since_fired"):
        a, b = getattr(cpu, name), getattr(dev, name).cpu()
        assert torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4), name


def data(n=6000, d=16, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return 5.0 + 20.0 * torch.randn(n, d, generator=gen)


def explained(sae, x) -> float:
    with torch.no_grad():
        x = x.to(sae.W_dec.device)
        return 1 - float((x - sae(x)).pow(2).sum() / (x - x.mean(0)).pow(2).sum())


@pytest.mark.parametrize("device", DEVICES)
def test_fit_sae_trains_where_the_rows_are_and_as_well_as_on_the_cpu(device, monkeypatch):
    x = data()
    on_cpu = fit_sae(x, width=64, k=8, tokens=40_000, batch=1000, seed=2)
    here = fit_sae(x.to(device), width=64, k=8, tokens=40_000, batch=1000, seed=2)
    assert all(p.device.type == torch.device(device).type for p in here.parameters())
    assert explained(here, x) == pytest.approx(explained(on_cpu, x), abs=0.02)
    assert explained(here, x) > 0.7
    # rows on the host sent to the device: copied there once, or a batch at a time when they don't fit
    sent = fit_sae(x, width=64, k=8, tokens=40_000, batch=1000, seed=2, device=device)
    monkeypatch.setattr(sources, "DEVICE_SHARE", 0.0)
    batched = fit_sae(x, width=64, k=8, tokens=40_000, batch=1000, seed=2, device=device)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.equal(getattr(sent, name), getattr(here, name)), name  # the same rows drawn: the same SAE
        assert torch.equal(getattr(batched, name), getattr(here, name)), name


@pytest.mark.parametrize("device", DEVICES)
def test_a_diverging_fit_is_stopped_with_its_fix_though_the_loss_is_read_only_now_and_then(device):
    seen = []
    with pytest.raises(SAEError, match="diverged.*smaller lr"):
        fit_sae(data().to(device), width=32, k=4, tokens=400_000, batch=1000, lr=1e30,
                progress=lambda done, total, message: seen.append(done))
    assert len(seen) < 10  # stopped at one of the first readings, not after the 400 steps


@pytest.mark.parametrize("device", DEVICES)
def test_train_sae_returns_the_sae_on_the_models_device_from_memory_or_disk(device, tmp_path, monkeypatch):
    model = GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16), seed=0).eval().to(device)
    ids = torch.randint(40, (20, 16), generator=torch.Generator().manual_seed(0))
    hook = "blocks.0.hook_resid_post"
    with harvest_module.harvest(model, ids, hook) as rows:
        assert isinstance(rows, torch.Tensor) and rows.device == model.device  # kept where the model is
    in_memory = train_sae(model, ids, hook, width=32, k=4, tokens=2048, batch=256)
    monkeypatch.setattr(harvest_module, "MEMORY_BYTES", 0)
    monkeypatch.setattr(sources, "DEVICE_SHARE", 0.0)
    from_disk = train_sae(model, ids, hook, width=32, k=4, tokens=2048, batch=256, cache_dir=tmp_path)
    for sae in (in_memory, from_disk):
        assert all(p.device == model.device for p in sae.parameters())
    assert list(tmp_path.iterdir()) == []  # the cache is gone


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=CUDA_MARKS)])
def test_a_step_on_cuda_asks_the_host_nothing(device):
    """No .item(), nonzero or bincount inside a step: the host queues steps ahead of the card. The
    dead set is read at the first step (and every dead_every steps), never in between."""
    tr, x = trainer(device, n_dead=20, B=64)
    tr.dead_every = 1000
    tr.step(x)  # reads the dead set
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            fvu = tr.step(x)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert math.isfinite(float(fvu))
