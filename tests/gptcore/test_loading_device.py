"""Loading onto a GPU without a CPU copy first (issue 37): the file's bytes cross as they lie and the
Conv1D transpose and dtype cast run on the device (loading.staged_copy); NaN/Inf is screened there and
read back once (test_loading_faults.py takes that route too); a model the device has no room for is
refused before anything is copied.

The staged route is written for any device, so here it is taken on the CPU (`_accelerator` answers
yes) and compared with the route it replaces (copy_ from the mapped file): equal tensors, tensor by
tensor and for whole checkpoints of every layout. On a GPU (marked `cuda`) the real route is compared
with a CPU load of the same folder."""
from __future__ import annotations

import pytest
import torch

from gptcore.io import loading
from gptcore.io.checkpoints import LoadError
from gptcore.io.layouts import read_source
from gptcore.io.loading import copy_onto, load, staged_copy
from gptcore.model.params import format_bytes

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

TINY = dict(vocab_size=500, n_positions=32, n_embd=64, n_layer=2, n_head=4)
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def hf_model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(**{**TINY, **overrides}, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # every parameter random: a transposed or misplaced one shows
        for p in model.parameters():
            p.copy_(0.2 * torch.randn_like(p))
    return model


def _old_copy(src: torch.Tensor, dtype) -> torch.Tensor:
    """The route the staged copy replaces: copy_ straight from the file's (maybe transposed) tensor."""
    dst = torch.empty(src.shape, dtype=dtype)
    dst.copy_(src)
    return dst


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("stored_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["conv1d view", "contiguous", "row slice"])
def test_a_staged_copy_equals_copy_from_the_file(layout, stored_dtype, dtype):
    stored = torch.randn(48, 80).to(stored_dtype)  # as the file holds it
    src = {"conv1d view": stored.t(), "contiguous": stored, "row slice": stored[::2]}[layout]
    got = staged_copy(src, dtype, torch.device("cpu"))
    want = _old_copy(src, dtype)
    assert got.dtype == dtype and got.shape == src.shape and got.is_contiguous()
    assert torch.equal(got, want)
    assert got.untyped_storage().data_ptr() != stored.untyped_storage().data_ptr()  # a copy: the file may change


def _save_layouts(tmp_path) -> dict:
    """One folder or file per layout a GPT-2 comes in, each holding its own random weights."""
    tied, untied = hf_model(1), hf_model(2, tie_word_embeddings=False)
    tied.save_pretrained(tmp_path / "hf")
    tied.save_pretrained(tmp_path / "sharded", max_shard_size="60KB")
    (tmp_path / "bin").mkdir()
    untied.config.to_json_file(tmp_path / "bin" / "config.json")
    torch.save(untied.state_dict(), tmp_path / "bin" / "pytorch_model.bin")  # detached: always copied
    nano = {"_orig_mod." + k: (v.t().contiguous() if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
                               else v.clone()) for k, v in tied.state_dict().items()}
    args = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, bias=True, vocab_size=500, dropout=0.0)
    torch.save({"model": nano, "model_args": args}, tmp_path / "ckpt.pt")
    return {name: tmp_path / name for name in ("hf", "sharded", "bin")} | {"nanogpt": tmp_path / "ckpt.pt"}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_every_layout_loads_through_the_staged_route_to_the_same_model(tmp_path, monkeypatch, dtype):
    sources = _save_layouts(tmp_path)
    want = {name: load(path, device="cpu", dtype=dtype)[0] for name, path in sources.items()}
    monkeypatch.setattr(loading, "_accelerator", lambda device: True)
    monkeypatch.setattr(loading, "_usable_in_place", lambda *a: False)
    for name, path in sources.items():
        model, info = load(path, device="cpu", dtype=dtype)
        ref = want[name].state_dict()
        assert model.state_dict().keys() == ref.keys()
        for key, tensor in model.state_dict().items():
            assert tensor.dtype == ref[key].dtype and torch.equal(tensor, ref[key]), (name, key)
        assert (model.unembed.weight is model.embed.weight) == info.tied == (name != "bin")  # tying kept


# -- room on the device --------------------------------------------------------------------------------

def _pretend_a_gpu(monkeypatch, free: int) -> list:
    """torch says a GPU is there with `free` bytes; returns the list copy_onto calls would be logged in."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 << 30))
    copies = []
    monkeypatch.setattr(loading, "copy_onto", lambda *a: copies.append(a) or copy_onto(*a))
    return copies


def test_a_model_the_gpu_has_no_room_for_is_refused_before_anything_is_copied(tmp_path, monkeypatch):
    hf_model(5).save_pretrained(tmp_path / "hf")
    raw = read_source(tmp_path / "hf")
    weights = sum(t.numel() for k, t in raw.state.items() if k != "lm_head.weight" and not k.endswith(".attn.bias"))
    largest = max(t.numel() * t.element_size() for t in raw.state.values())
    need, free = 4 * weights + largest, 4 * weights // 3  # fp32: the weights, and one tensor in transit
    copies, progress = _pretend_a_gpu(monkeypatch, free), []
    with pytest.raises(LoadError) as raised:
        load(tmp_path / "hf", device="cuda", progress=lambda *a: progress.append(a))
    message = str(raised.value)
    assert format_bytes(need) in message and format_bytes(free) in message  # both sizes, named
    assert "device cpu" in message and "bf16 or fp16" in message  # and the ways out
    assert copies == [] and progress == []  # refused before the first tensor moved


def test_a_model_that_fits_passes_the_check_and_bf16_halves_the_need(tmp_path, monkeypatch):
    hf_model(6).save_pretrained(tmp_path / "hf")
    raw = read_source(tmp_path / "hf")
    weights = sum(t.numel() for k, t in raw.state.items() if k != "lm_head.weight" and not k.endswith(".attn.bias"))
    largest = max(t.numel() * t.element_size() for t in raw.state.values())
    _pretend_a_gpu(monkeypatch, 2 * weights + largest)  # room for bf16, not for fp32
    loading.check_room(raw, torch.device("cuda"), torch.bfloat16)
    with pytest.raises(LoadError, match="bf16 or fp16"):
        loading.check_room(raw, torch.device("cuda"), torch.float32)
    with pytest.raises(LoadError) as raised:  # already half: the fix offered is the CPU, not bf16
        _pretend_a_gpu(monkeypatch, weights)
        loading.check_room(raw, torch.device("cuda"), torch.bfloat16)
    assert "device cpu" in str(raised.value) and "bf16 or fp16" not in str(raised.value)


def test_the_app_and_the_training_ask_the_same_free_memory(monkeypatch):
    from explorer.runtime.devices import available_memory
    from gptcore.training.setup import free_memory

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (123 << 20, 80 << 30))
    assert available_memory(torch.device("cuda")) == free_memory("cuda") == 123 << 20
    assert available_memory(torch.device("cpu")) > 0 and free_memory("cpu") > 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_on_cuda_every_layout_equals_its_cpu_load(tmp_path, dtype):
    for name, path in _save_layouts(tmp_path).items():
        gpu, info = load(path, device="cuda", dtype=dtype)
        cpu, _ = load(path, device="cpu", dtype=dtype)
        assert info.device.startswith("cuda") and gpu.device.type == "cuda"
        for key, tensor in gpu.state_dict().items():
            assert tensor.is_cuda and torch.equal(tensor.cpu(), cpu.state_dict()[key]), (name, key)
