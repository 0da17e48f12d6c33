"""Transcoders train on the device where their rows or the model are, and the graph runs there
(issues 37, 38): every test runs on the CPU and, where torch sees a GPU, on CUDA (marked `cuda`). A
few steps on a device equal the same steps on the CPU (the step against autograd on every device
and product dtype is in test_circuits_transcoder.py); `fit_transcoder` from rows on the device
equals the fit from rows on the host bit for bit (the same rows drawn); `train_transcoders` returns
the set on the model's device, from memory or the disk cache; the attribution graph of a model and
its transcoders on the device equals the CPU's; on CUDA a step asks the host nothing."""
import math

import pytest
import torch

from gptcore import GPT, GPTConfig, attribution_graph, fit_transcoder, train_transcoders
from gptcore.interp.circuits.harvest import harvest_mlps
from gptcore.interp.sae import harvest as sae_harvest
from gptcore.interp.sae import sources
from test_circuits_graph import GPT2_LIKE, random_transcoders
from test_circuits_transcoder import CUDA_MARKS, DEVICES, held_out_fvu, sparse_map_data, trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("device", DEVICES)
def test_steps_on_a_device_equal_the_same_steps_on_the_cpu(device):
    """Same weights and batches, float32 products on both: the device changes nothing but where the
    numbers are (the dead set read again mid-run, AuxK and revival on)."""
    trainers = {}
    for where in ("cpu", device):
        tr, _x, _y = trainer(where, torch.float32, n_dead=20, B=64)
        tr.dead_every, tr.revive = 2, True
        gen = torch.Generator().manual_seed(7)
        for _ in range(5):
            tr.step(torch.randn(64, 12, generator=gen).to(where), (2 * torch.randn(64, 12, generator=gen)).to(where))
        trainers[where] = tr
    cpu, dev = trainers["cpu"], trainers[device]
    for name in ("enc", "b_enc", "W_dec", "b_dec", "W_skip", "since_fired"):
        a, b = getattr(cpu, name), getattr(dev, name).cpu()
        assert torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("device", DEVICES)
def test_fit_transcoder_trains_where_the_rows_are_and_as_well_as_on_the_cpu(device, monkeypatch):
    x, y, _ = sparse_map_data(n=12_000)
    settings = dict(width=96, k=2, tokens=60_000, batch=1000, seed=1)
    on_cpu = fit_transcoder(x[:10_000], y[:10_000], **settings)
    here = fit_transcoder(x[:10_000].to(device), y[:10_000].to(device), **settings)
    assert all(p.device.type == torch.device(device).type for p in here.parameters())
    held = (x[10_000:].to(device), y[10_000:].to(device))
    assert held_out_fvu(here, *held) == pytest.approx(held_out_fvu(on_cpu, x[10_000:], y[10_000:]), abs=0.02)
    assert held_out_fvu(here, *held) < 0.1
    # rows on the host sent to the device: copied there once, or a batch at a time when they don't fit
    sent = fit_transcoder(x[:10_000], y[:10_000], **settings, device=device)
    monkeypatch.setattr(sources, "DEVICE_SHARE", 0.0)
    batched = fit_transcoder(x[:10_000], y[:10_000], **settings, device=device)
    for name, p in here.named_parameters():
        assert torch.equal(dict(sent.named_parameters())[name], p), name  # the same rows drawn: the same transcoder
        assert torch.equal(dict(batched.named_parameters())[name], p), name


@pytest.mark.parametrize("device", DEVICES)
def test_train_transcoders_returns_the_set_on_the_models_device_from_memory_or_disk(device, tmp_path, monkeypatch):
    model = GPT(GPTConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16), seed=0).eval().to(device)
    ids = torch.randint(30, (20, 16), generator=torch.Generator().manual_seed(0))
    with harvest_mlps(model, ids) as pairs:
        assert all(isinstance(t, torch.Tensor) and t.device == model.device for pair in pairs for t in pair)
    in_memory = train_transcoders(model, ids, width=32, k=4, tokens=2048, batch=256)
    monkeypatch.setattr(sae_harvest, "MEMORY_BYTES", 0)
    monkeypatch.setattr(sources, "DEVICE_SHARE", 0.0)
    from_disk = train_transcoders(model, ids, width=32, k=4, tokens=2048, batch=256, cache_dir=tmp_path)
    for transcoders in (in_memory, from_disk):
        assert [t.layer for t in transcoders] == [0, 1]
        assert all(p.device == model.device for t in transcoders for p in t.parameters())
    assert list(tmp_path.iterdir()) == []  # the cache is gone


@pytest.mark.parametrize("device", DEVICES)
def test_the_graph_of_a_model_and_transcoders_on_a_device_equals_the_cpus(device):
    model = GPT(GPT2_LIKE, seed=0).eval()
    transcoders = random_transcoders(GPT2_LIKE)
    ids = torch.randint(50, (12,), generator=torch.Generator().manual_seed(1))
    want = attribution_graph(model, transcoders, ids)
    got = attribution_graph(model.to(device), [t.to(device) for t in transcoders], ids.to(device))
    assert torch.equal(got.features, want.features) and torch.equal(got.logit_tokens, want.logit_tokens)
    scale = float(want.adjacency.abs().max())
    assert float((got.adjacency - want.adjacency).abs().max()) <= 1e-4 * scale
    for name in ("activations", "logit_probs", "error_norms", "pre_activations", "logit_values"):
        assert torch.allclose(getattr(got, name), getattr(want, name), atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=CUDA_MARKS)])
def test_a_step_on_cuda_asks_the_host_nothing(device):
    """No .item(), nonzero or boolean indexing inside a step: the host queues steps ahead of the card.
    The dead set is read at the first step (and every dead_every steps), never in between."""
    tr, x, y = trainer(device, n_dead=20, B=64)
    tr.dead_every = 1000
    tr.step(x, y)  # reads the dead set
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            fvu = tr.step(x, y)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert math.isfinite(float(fvu))
