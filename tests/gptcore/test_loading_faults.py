"""Issue 9, items 1-7: whatever file a user points the loader at, the answer is a LoadError naming
the file and the problem — never code run from the file, never a crash, never a half-loaded model."""
from __future__ import annotations

import dataclasses
import json
import collections
import os
import random
import pickle
import struct
import warnings
from pathlib import Path

import pytest
import torch

from gptcore.io.checkpoints import LoadError
from gptcore.io.loading import load

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


@dataclasses.dataclass
class TrainingConfig:
    """What a training script might pickle next to its weights (a custom class)."""

    learning_rate: float = 3e-4


@pytest.fixture(scope="module")
def hf_tiny():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=300, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


@pytest.fixture
def folder(hf_tiny, tmp_path) -> Path:
    hf_tiny.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


@pytest.fixture
def torch_load_calls(monkeypatch):
    """Every torch.load the loader makes, with its arguments (the real torch.load still runs)."""
    calls, real = [], torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    return calls


# -- 1. unpickling that would run code -------------------------------------------------------------

class OpensAFile:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class ExecsCode:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


@pytest.mark.parametrize("payload", [OpensAFile, ExecsCode])
@pytest.mark.parametrize("where", ["ckpt.pt", "pytorch_model.bin"])
def test_fault_pickle_that_would_run_code_is_refused_and_never_runs(payload, where, hf_tiny, tmp_path, torch_load_calls):
    marker = tmp_path / "code-ran"
    target = tmp_path / "out" / where
    target.parent.mkdir()
    if where == "pytorch_model.bin":  # inside an HF folder
        hf_tiny.config.to_json_file(target.parent / "config.json")
        torch.save({**hf_tiny.state_dict(), "lm_head.extra": payload(marker)}, target)
    else:  # a nanoGPT-style checkpoint
        torch.save({"model": hf_tiny.state_dict(), "model_args": {}, "hook": payload(marker)}, target)
    with pytest.raises(LoadError) as raised:
        load(target.parent if where == "pytorch_model.bin" else target, device="cpu")
    message = str(raised.value)
    assert not marker.exists()
    assert "refused" in message and str(target) in message and "asks to call" in message and "run any code" in message
    assert ("open" in message) if payload is OpensAFile else ("exec" in message)
    assert torch_load_calls and all(c.get("weights_only") is True for c in torch_load_calls)  # no unsafe retry


class CallsSystem:
    """Pickles as `posix.system(...)` (os.system's home on Linux): the payload of the issue-23 report."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _write(form: str, obj, target: Path) -> None:
    if form.startswith("raw-protocol-"):  # pickle.dump, not torch.save: no zip, no torch header
        target.write_bytes(pickle.dumps(obj, protocol=int(form.rsplit("-", 1)[1])))
    elif form == "torch-legacy":
        torch.save(obj, target, _use_new_zipfile_serialization=False)
    else:
        torch.save(obj, target)


def _refuse(target: Path) -> str:
    """The loader's message for `target`, with every warning raised on the way recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(LoadError) as raised:
            load(target, device="cpu")
    torch_warnings = [str(w.message) for w in caught if "torch" in (w.filename or "")]
    assert torch_warnings == []  # e.g. "Detected pickle protocol 4 … please file an issue" must not leak
    return str(raised.value)


PICKLE_FORMS = ["raw-protocol-2", "raw-protocol-4", "raw-protocol-5", "torch-legacy", "torch-zip"]


@pytest.mark.parametrize("form", PICKLE_FORMS)
def test_fault_code_pickle_is_named_the_same_in_every_form(form, hf_tiny, tmp_path):
    """Issue 23: a raw protocol-4 pickle used to be called "corrupt … Please file an issue";
    every form now names the call it asks for, in the torch-zip refusal's words."""
    marker, target = tmp_path / "code-ran", tmp_path / "ckpt.pt"
    _write(form, {"model": hf_tiny.state_dict(), "model_args": {}, "hook": CallsSystem(marker)}, target)
    message = _refuse(target)
    assert not marker.exists()
    assert message.startswith(f"refused {target}: it asks to call `posix.system`"), message
    assert "Nothing was executed" in message and "run any code" in message
    for torch_words in ("Please file an issue", "WeightsUnpickler", "weights_only", "corrupt"):
        assert torch_words not in message


def test_fault_plain_pickle_of_tensors_is_named_as_such(hf_tiny, tmp_path):
    target = tmp_path / "weights.pt"
    _write("raw-protocol-4", dict(hf_tiny.state_dict()), target)
    message = _refuse(target)
    assert "plain pickle of tensors" in message and "torch.storage._load_from_bytes" in message
    assert "Nothing was executed" in message and "torch.save" in message


def test_fault_clean_protocol_4_torch_save_says_why_it_cannot_be_read(hf_tiny, tmp_path):
    """torch's restricted reader stops at protocol 4's FRAME opcode even on plain weights."""
    target = tmp_path / "p4.pt"
    torch.save(dict(hf_tiny.state_dict()), target, pickle_protocol=4)
    message = _refuse(target)
    assert "protocol 4" in message and "Nothing in it asks to run code" in message
    assert "Please file an issue" not in message and "operand" not in message


@pytest.mark.parametrize("form", ["torch-zip", "torch-legacy"])
def test_fault_truncated_torch_file_in_our_words(form, hf_tiny, tmp_path):
    target = tmp_path / "ckpt.pt"
    _write(form, {"model": hf_tiny.state_dict(), "model_args": {}}, target)
    target.write_bytes(target.read_bytes()[:5000])
    message = _refuse(target)
    assert "corrupt file" in message and "re-download" in message
    assert ("cut short" if form == "torch-zip" else "ends early") in message
    for torch_words in ("miniz", "internal", "PytorchStreamReader", "high likelihood"):
        assert torch_words not in message


def test_static_scan_names_globals_in_order_and_runs_nothing(tmp_path):
    import gptcore.io.torch_refusals as torch_refusals

    marker, target = tmp_path / "code-ran", tmp_path / "x.pkl"
    target.write_bytes(pickle.dumps([collections.OrderedDict(), CallsSystem(marker), OpensAFile(marker)], protocol=4))
    facts = torch_refusals.scan(target, "pickle")
    assert facts.names == ["collections.OrderedDict", "posix.system", "io.open"]
    assert facts.protocol == 4 and facts.framed and not marker.exists()
    assert torch_refusals.refused_names(facts) == ["posix.system", "io.open"]


# -- 2. a custom class ------------------------------------------------------------------------------

def test_fault_checkpoint_holding_a_custom_class_is_refused_with_the_class_named(hf_tiny, tmp_path, torch_load_calls):
    path = tmp_path / "ckpt.pt"
    model_args = dict(n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=300, bias=True)
    torch.save({"model": hf_tiny.state_dict(), "model_args": model_args, "config": TrainingConfig()}, path)
    with pytest.raises(LoadError, match=r"custom class `[\w.]*TrainingConfig`") as raised:
        load(path, device="cpu")
    assert str(path) in str(raised.value) and "Nothing was executed" in str(raised.value)
    assert len(torch_load_calls) == 1 and torch_load_calls[0]["weights_only"] is True


# -- 3. truncated, empty, random bytes --------------------------------------------------------------

def _damage(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[: len(data) * 2 // 3]
    if how == "empty":
        return b""
    # Same size, random bytes, seeded: which bytes open the file decides what it is taken for.
    return random.Random(len(data)).randbytes(len(data))


@pytest.mark.parametrize("how", ["truncated", "empty", "random"])
@pytest.mark.parametrize("kind", ["model.safetensors", "ckpt.pt", "pytorch_model.bin"])
def test_fault_corrupt_file_gives_corrupt_file_message(kind, how, folder, hf_tiny, tmp_path):
    if kind == "model.safetensors":
        target, source = folder / kind, folder
    elif kind == "pytorch_model.bin":
        (folder / "model.safetensors").unlink()
        target, source = folder / kind, folder
        torch.save(hf_tiny.state_dict(), target)
    else:
        target = source = tmp_path / kind
        torch.save({"model": hf_tiny.state_dict(), "model_args": {}}, target)
    target.write_bytes(_damage(target.read_bytes(), how))
    with pytest.raises(LoadError, match="corrupt file") as raised:
        load(source, device="cpu")
    assert str(target) in str(raised.value) and "re-download" in str(raised.value)


def test_fault_missing_shard_is_named(hf_tiny, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "sharded", max_shard_size="30KB")
    shards = sorted((tmp_path / "sharded").glob("model-*.safetensors"))
    shards[1].unlink()
    with pytest.raises(LoadError, match=f"shard {shards[1].name} listed in model.safetensors.index.json is missing"):
        load(tmp_path / "sharded", device="cpu")


# -- 4. a safetensors header that lies ------------------------------------------------------------

def _safetensors_bytes(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


F32_4 = {"dtype": "F32", "shape": [4]}  # 16 bytes


@pytest.mark.parametrize("case, expected", [
    ("length longer than the file", "header claims"),
    ("overlapping offsets", "overlap"),
    ("offsets past the end", "truncated"),
    ("size disagrees with shape", "needs 16 bytes"),
    ("header is not JSON", "not valid JSON"),
])
def test_fault_safetensors_header_that_lies(case, expected, tmp_path):
    path = tmp_path / "lies.safetensors"
    data = bytes(32)
    if case == "length longer than the file":
        good = _safetensors_bytes({"a": {**F32_4, "data_offsets": [0, 16]}}, data[:16])
        blob = struct.pack("<Q", 10_000_000) + good[8:]
    elif case == "overlapping offsets":
        blob = _safetensors_bytes({"a": {**F32_4, "data_offsets": [0, 16]}, "b": {**F32_4, "data_offsets": [8, 24]},
                                   "c": {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]}}, data)
    elif case == "offsets past the end":
        blob = _safetensors_bytes({"a": {**F32_4, "data_offsets": [0, 16]}, "b": {**F32_4, "data_offsets": [16, 32]}},
                                  data[:16])
    elif case == "size disagrees with shape":
        blob = _safetensors_bytes({"a": {**F32_4, "data_offsets": [0, 32]}}, data)
    else:
        blob = struct.pack("<Q", 9) + b"{not json" + data
    path.write_bytes(blob)
    with pytest.raises(LoadError, match=expected) as raised:
        load(path, n_head=1, device="cpu")
    assert "corrupt file" in str(raised.value) and str(path) in str(raised.value)


# -- 5. NaN / Inf weights (refused, with the tensors named) ----------------------------------------

@pytest.fixture(params=["cpu", "gpu's route"])
def route(request, monkeypatch):
    """The CPU's load, or the one a GPU load takes (staged copies, the NaN screen on the device and read
    back once: gptcore.io.loading), taken on the CPU (tests/gptcore/test_loading_device.py)."""
    from gptcore.io import loading

    stacks = []
    if request.param != "cpu":
        real_stack = torch.stack
        monkeypatch.setattr(loading, "_accelerator", lambda device: True)
        monkeypatch.setattr(loading, "_usable_in_place", lambda *a: False)
        monkeypatch.setattr(torch, "stack", lambda ts, *a, **k: stacks.append(len(ts)) or real_stack(ts, *a, **k))
    return request.param, stacks


def test_fault_nan_and_inf_weights_are_refused_with_tensor_names(hf_tiny, tmp_path, route):
    state = {k: v.clone() for k, v in hf_tiny.state_dict().items() if k != "lm_head.weight"}
    state["transformer.h.1.mlp.c_fc.weight"][3, :5] = float("nan")
    state["transformer.wpe.weight"][0, 0] = float("inf")
    (tmp_path / "bad").mkdir()
    hf_tiny.config.to_json_file(tmp_path / "bad" / "config.json")
    safetensors_torch.save_file(state, tmp_path / "bad" / "model.safetensors")
    with pytest.raises(LoadError, match="NaN/Inf") as raised:
        load(tmp_path / "bad", device="cpu")
    message = str(raised.value)
    assert "blocks.1.mlp.c_fc.weight (5 of" in message and "pos_embed.weight (1 of" in message
    assert "blocks.0" not in message and "earlier" in message
    assert message.index("pos_embed.weight") < message.index("blocks.1.mlp.c_fc.weight")  # the model's order
    name, stacks = route
    assert stacks == ([] if name == "cpu" else [len(state)])  # on a GPU every tensor's flag comes back in one read


def test_fault_values_that_overflow_fp16_are_refused_in_fp16_only(hf_tiny, tmp_path, route):
    state = {k: v.clone() for k, v in hf_tiny.state_dict().items() if k != "lm_head.weight"}
    state["transformer.h.0.attn.c_proj.weight"][0, 0] = 1e6  # finite in fp32 and bf16, Inf in fp16
    (tmp_path / "big").mkdir()
    hf_tiny.config.to_json_file(tmp_path / "big" / "config.json")
    safetensors_torch.save_file(state, tmp_path / "big" / "model.safetensors")
    with pytest.raises(LoadError, match=r"overflow fp16.*blocks\.0\.attn\.c_proj\.weight.*bf16 or fp32"):
        load(tmp_path / "big", dtype="fp16", device="cpu")
    model, _ = load(tmp_path / "big", dtype="bf16", device="cpu")
    assert torch.isfinite(model.blocks[0].attn.c_proj.weight).all()


# -- 6. shapes, missing and extra keys, listed ------------------------------------------------------

@pytest.mark.parametrize("fault", ["missing", "extra", "shape"])
def test_fault_wrong_keys_and_shapes_are_listed(fault, hf_tiny, tmp_path):
    state = {k: v.clone() for k, v in hf_tiny.state_dict().items() if k != "lm_head.weight"}
    config = hf_tiny.config.to_dict()
    if fault == "missing":
        del state["transformer.h.1.mlp.c_fc.weight"], state["transformer.ln_f.bias"]
        expected = ["missing keys", "blocks.1.mlp.c_fc.weight", "ln_final.bias"]
    elif fault == "extra":
        state["transformer.h.0.attn.rotary.inv_freq"] = torch.ones(4)
        state["value_head.weight"] = torch.ones(2)
        expected = ["unexpected keys", "transformer.h.0.attn.rotary.inv_freq", "value_head.weight"]
    else:
        config["vocab_size"] = 256  # config.json from another model
        expected = ["shape mismatch for embed.weight: checkpoint (300, 32), model (256, 32)", "config.json"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    safetensors_torch.save_file(state, tmp_path / "m" / "model.safetensors")
    with pytest.raises(LoadError) as raised:
        load(tmp_path / "m", device="cpu")
    for text in expected:
        assert text in str(raised.value)


def test_fault_config_json_that_is_not_gpt2_or_broken(folder):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "mistral"}))
    with pytest.raises(LoadError, match="model_type 'mistral' is not supported.*llama: LlamaForCausalLM"):
        load(folder, device="cpu")
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))  # a GPT-2 head
    with pytest.raises(LoadError, match=r"architectures \['GPT2LMHeadModel'\] has no LlamaForCausalLM"):
        load(folder, device="cpu")
    gpt2_fields = {k: v for k, v in config.items() if k != "architectures"}
    (folder / "config.json").write_text(json.dumps({**gpt2_fields, "model_type": "llama"}))
    with pytest.raises(LoadError, match="lacks hidden_size, intermediate_size"):
        load(folder, device="cpu")
    (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "n_head"}))
    with pytest.raises(LoadError, match="lacks n_head"):
        load(folder, device="cpu")
    (folder / "config.json").write_text("{ truncated")
    with pytest.raises(LoadError, match="corrupt file .*config.json: not valid JSON"):
        load(folder, device="cpu")


# -- 7. a hub id that is not cached while offline ---------------------------------------------------

@pytest.mark.parametrize("model_id", ["gpt2", "openai-community/gpt2-medium", "someone/tiny-gpt2"])
def test_fault_hub_model_not_cached_while_offline(model_id, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub

    attempts = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: attempts.append(a))
    with pytest.raises(LoadError) as raised:
        load(model_id, device="cpu")
    message = str(raised.value)
    assert f"{model_id} is not cached" in message and "HF_HUB_OFFLINE" in message
    assert "run once with network" in message.lower() and "local folder" in message
    assert attempts == []


def test_fault_unknown_source_names_the_options(tmp_path):
    with pytest.raises(LoadError, match="no such file or folder.*gpt2, gpt2-medium"):
        load(tmp_path / "nope.safetensors", device="cpu")
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(LoadError, match="holds no checkpoint"):
        load(tmp_path / "empty-dir", device="cpu")


def test_fault_hub_model_not_cached_without_network(tmp_path, monkeypatch):
    """Not switched offline, but nothing answers: said at once, not after huggingface_hub's ~30 s of retries."""
    import socket

    with socket.socket() as s:  # a port on which nothing listens once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                 "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(LoadError, match=r"gpt2-xl is not cached .* cannot be reached \(no network\?\)\. Run once with network"):
        load("gpt2-xl", device="cpu")
