"""gptcore.load on every checkpoint layout it accepts, each written by the test and checked
against HF transformers' GPT2LMHeadModel on the same weights (logits to 1e-5)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from gptcore.__main__ import main as cli_main
from gptcore.io.checkpoints import LoadCancelled, LoadError
from gptcore.io.head_count import HeadCountNeeded
from gptcore.io.hub import HUB_IDS, cached_snapshot
from gptcore.io.loading import LoadInfo, is_hub_cached, load, resolve_device, resolve_dtype
from gptcore.model.gpt import GPT
from gptcore.model.params import count_parameters

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

TINY = dict(vocab_size=500, n_positions=32, n_embd=64, n_layer=2, n_head=4)


def hf_model(seed: int = 0, **overrides) -> "transformers.GPT2LMHeadModel":
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(**{**TINY, **overrides}, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # GPT-2's init leaves LayerNorms at 1/0, biases at 0 and attention near uniform:
        for name, p in model.named_parameters():  # perturb them so that every weight moves the logits
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith("c_attn.weight"):
                p.mul_(8.0)
    return model


@pytest.fixture(scope="module")
def hf_tiny():
    return hf_model()


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(1))


def assert_same_logits(ours: GPT, hf, idx, atol=1e-5):
    with torch.no_grad():
        want = hf(idx).logits
        got = ours(idx)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol, rtol=0)


def hf_state_as_nanogpt(hf) -> dict[str, torch.Tensor]:
    """The same weights as nanoGPT saves them: nn.Linear layout (Conv1D transposed back),
    `_orig_mod.` from torch.compile, the head sharing wte's storage, the causal-mask buffer."""
    out = {}
    for key, t in hf.state_dict().items():
        if key.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")):
            t = t.t().contiguous()
        out["_orig_mod." + key] = t.clone()
    out["_orig_mod.lm_head.weight"] = out["_orig_mod.transformer.wte.weight"]
    T = hf.config.n_positions
    out["_orig_mod.transformer.h.0.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    return out


# -- each layout -------------------------------------------------------------------------------

def test_hf_folder_safetensors_matches_transformers(hf_tiny, tokens, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "tiny")
    model, info = load(tmp_path / "tiny", device="cpu")
    assert_same_logits(model, hf_tiny, tokens)
    assert not model.training and model.device.type == "cpu" and model.dtype == torch.float32
    assert isinstance(info, LoadInfo)
    assert info.format == "safetensors" and info.path.endswith("model.safetensors") and info.name == "tiny"
    assert info.n_params == hf_tiny.num_parameters() == count_parameters(info.config).total
    assert info.tied and model.unembed.weight is model.embed.weight
    assert (info.dtype, info.device, info.trained, info.status) == ("fp32", "cpu", None, "loaded")  # random weights
    assert info.config.n_head == 4 and info.config.block_size == 32


def test_sharded_safetensors_folder(hf_tiny, tokens, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "sharded", max_shard_size="60KB")
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 2
    model, info = load(tmp_path / "sharded", device="cpu")
    assert info.format == "sharded safetensors"
    assert_same_logits(model, hf_tiny, tokens)


def test_pytorch_model_bin_folder_with_untied_head(tokens, tmp_path):
    """The format older transformers wrote (torch.save of the state dict), here with its own head."""
    hf = hf_model(seed=3, tie_word_embeddings=False)
    with torch.no_grad():
        hf.lm_head.weight.copy_(torch.randn_like(hf.lm_head.weight))
    folder = tmp_path / "bin"
    folder.mkdir()
    hf.config.to_json_file(folder / "config.json")
    torch.save(hf.state_dict(), folder / "pytorch_model.bin")
    model, info = load(folder, device="cpu")
    assert info.format == "pytorch_model.bin" and not info.tied
    assert model.unembed.weight is not model.embed.weight
    assert_same_logits(model, hf, tokens)


def test_nanogpt_checkpoint(hf_tiny, tokens, tmp_path):
    model_args = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, bias=True, vocab_size=500, dropout=0.0)
    ckpt = {
        "model": hf_state_as_nanogpt(hf_tiny), "model_args": model_args, "iter_num": 250,
        "best_val_loss": torch.tensor(3.25), "config": {"dataset": "openwebtext", "learning_rate": 6e-4},
        "optimizer": {"state": {}, "param_groups": [{"lr": 6e-4, "params": [0, 1]}]},
    }
    out = tmp_path / "out-run"
    out.mkdir()
    torch.save(ckpt, out / "ckpt.pt")
    for source in (out / "ckpt.pt", out):  # the file, or nanoGPT's out_dir
        model, info = load(source, device="cpu")
        assert info.format == "nanoGPT ckpt" and info.name == "out-run/ckpt.pt" and info.tied
        assert_same_logits(model, hf_tiny, tokens)


def test_model_from_ckpt_pt_survives_the_file_being_rewritten(hf_tiny, tokens, tmp_path):
    """nanoGPT rewrites ckpt.pt in place during training; the loaded model must not follow the file."""
    args = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, bias=True, vocab_size=500)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": hf_state_as_nanogpt(hf_tiny), "model_args": args}, path)
    model, _ = load(path, device="cpu")
    with torch.no_grad():
        before = model(tokens)
    torch.save({"model": hf_state_as_nanogpt(hf_model(seed=9)), "model_args": args}, path)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), before, atol=0, rtol=0)


def test_nanogpt_meta_pkl_is_never_unpickled(hf_tiny, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    torch.save({"model": hf_state_as_nanogpt(hf_tiny),
                "model_args": dict(n_layer=2, n_head=4, n_embd=64, block_size=32, bias=True, vocab_size=500)},
               out / "ckpt.pt")
    marker = tmp_path / "meta-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    import pickle

    (out / "meta.pkl").write_bytes(pickle.dumps({"stoi": Payload()}))
    _, info = load(out / "ckpt.pt", device="cpu")
    assert not marker.exists()
    assert any("character-level" in w for w in info.warnings)  # vocab 500 < GPT-2's: the tokenizer will not fit


def test_lone_safetensors_needs_heads(hf_tiny, tokens, tmp_path):
    """Shapes give everything but the head count: a wrong guess is warned about (and really changes
    the outputs), n_head or a sidecar config.json fixes it."""
    lone = tmp_path / "weights" / "tiny-gpt.safetensors"
    lone.parent.mkdir()
    state = {k: v.contiguous() for k, v in hf_tiny.state_dict().items() if k != "lm_head.weight"}
    safetensors_torch.save_file(state, lone)

    with pytest.raises(HeadCountNeeded, match="--n-head"):
        load(lone, device="cpu")  # never a guess unless asked for
    guessed, info = load(lone, guess_heads=True, device="cpu")
    assert info.config.n_head == 1 and info.name == "tiny-gpt"
    assert any("n_head" in w and "assumed" in w for w in info.warnings)
    with torch.no_grad():
        assert (guessed(tokens) - hf_tiny(tokens).logits).abs().max() > 1e-3

    model, info = load(lone, n_head=4, device="cpu")
    assert info.config.n_head == 4 and not any("assumed" in w for w in info.warnings)
    assert_same_logits(model, hf_tiny, tokens)

    (lone.parent / "config.json").write_text(json.dumps({"n_head": 4}))
    model, info = load(lone, device="cpu")
    assert info.config.n_head == 4 and not any("assumed" in w for w in info.warnings)
    assert_same_logits(model, hf_tiny, tokens)


def test_lone_state_dict_pt_in_nanogpt_layout(hf_tiny, tokens, tmp_path):
    """A bare torch.save(model.state_dict()) in nn.Linear layout: the layout is told from c_attn's shape."""
    state = {k.removeprefix("_orig_mod."): v for k, v in hf_state_as_nanogpt(hf_tiny).items()}
    torch.save(state, tmp_path / "sd.pt")
    model, info = load(tmp_path / "sd.pt", n_head=4, device="cpu")
    assert info.format.startswith("torch state dict")
    assert_same_logits(model, hf_tiny, tokens)


def test_our_own_state_dict_round_trips(tmp_path):
    from gptcore.model.config import GPTConfig

    ours = GPT(GPTConfig(vocab_size=300, block_size=16, n_layer=2, n_head=2, n_embd=32, tie_weights=False), seed=5).eval()
    safetensors_torch.save_file({k: v.contiguous() for k, v in ours.state_dict().items()}, tmp_path / "ours.safetensors")
    model, info = load(tmp_path / "ours.safetensors", n_head=2, device="cpu")
    assert not info.tied
    idx = torch.randint(0, 300, (1, 16))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), ours(idx), atol=1e-6, rtol=0)


def gpt2_small_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights in GPT-2 small's HF layout, made directly: HF's own init of 124M
    parameters costs several times more than the load being tested."""
    C, V, T, gen = 768, 50257, 1024, torch.Generator().manual_seed(seed)
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C),
              "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for i in range(12):
        inner = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,),
                 "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
                 "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,), "mlp.c_proj.weight": (4 * C, C),
                 "mlp.c_proj.bias": (C,)}
        shapes.update({f"transformer.h.{i}.{k}": v for k, v in inner.items()})
    return {k: (torch.rand(v, generator=gen) - 0.5) * 0.1 for k, v in shapes.items()}


def test_gpt2_small_shape_round_trip(tmp_path):
    """The one full-size check: GPT-2 small's shapes, random weights, against from_pretrained."""
    folder = tmp_path / "gpt2-random"
    folder.mkdir()
    safetensors_torch.save_file(gpt2_small_state(), folder / "model.safetensors", metadata={"format": "pt"})
    transformers.GPT2Config().to_json_file(folder / "config.json")  # gpt2's shape: 12 × 12 × 768, vocab 50257
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    model, info = load(folder, device="cpu")
    assert info.n_params == 124_439_808 == hf.num_parameters()
    assert info.warnings == () and info.tied
    assert_same_logits(model, hf, torch.randint(0, 50257, (1, 16)))


# -- dtype, device, progress, cancel -----------------------------------------------------------

def test_bf16_load_casts_once_on_the_way_in(hf_tiny, tokens, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "tiny")
    model, info = load(tmp_path / "tiny", dtype="bf16", device="cpu")
    assert info.dtype == "bf16" and all(p.dtype == torch.bfloat16 for p in model.parameters())
    with torch.no_grad():
        got, want = model(tokens).float(), hf_tiny(tokens).logits
    assert (got - want).abs().max() < 0.05 * want.abs().max()  # bf16 keeps 8 bits of mantissa
    assert torch.equal(model.embed.weight.float(), hf_tiny.transformer.wte.weight.to(torch.bfloat16).float())


def test_dtype_and_device_specs():
    assert resolve_dtype(None) is torch.float32 and resolve_dtype("FP16") is torch.float16
    assert resolve_dtype(torch.bfloat16) is torch.bfloat16
    with pytest.raises(LoadError, match="fp32.*bf16.*fp16"):
        resolve_dtype("int8")
    with pytest.raises(LoadError, match="unknown device"):
        resolve_device("tpu-please")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")])
def test_auto_is_cuda_when_present_else_mps_else_cpu(real_auto_device, monkeypatch, cuda, mps, expected):
    """The rule itself, on any machine: what torch reports is replaced, not read."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert real_auto_device().type == expected == resolve_device(None).type == resolve_device("auto").type


def test_cuda_asked_for_where_torch_sees_none_names_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # so it runs on a GPU machine too
    with pytest.raises(LoadError, match="CUDA was requested but is not available.*cpu"):
        resolve_device("cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_load_onto_cuda_in_fp16(hf_tiny, tokens, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "tiny")
    model, info = load(tmp_path / "tiny", device="cuda", dtype="fp16")
    assert model.device.type == "cuda" and info.device.startswith("cuda") and model.dtype == torch.float16
    with torch.no_grad():
        got = model(tokens.cuda()).float().cpu()
    want = hf_tiny(tokens).logits
    assert (got - want).abs().max() < 0.01 * want.abs().max()


def test_progress_reports_bytes_up_to_the_total(hf_tiny, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "tiny")
    calls = []
    load(tmp_path / "tiny", progress=lambda done, total, what: calls.append((done, total, what)), device="cpu")
    dones = [c[0] for c in calls]
    assert len(calls) == 28  # one per stored tensor; the tied head is not a separate copy
    assert dones == sorted(dones) and dones[-1] == calls[-1][1] == hf_tiny.num_parameters() * 4
    assert {c[2] for c in calls} == {"loading weights"}


def test_cancel_between_tensors_raises_and_returns_nothing(hf_tiny, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "tiny")
    seen = []
    with pytest.raises(LoadCancelled) as raised:
        load(tmp_path / "tiny", progress=lambda *a: seen.append(a), cancel=lambda: len(seen) >= 3, device="cpu")
    assert isinstance(raised.value, LoadError) and len(seen) == 3


# -- the hub path, offline against a cache laid out as huggingface_hub does ------------------

def write_hub_cache(cache: Path, repo: str, folder: Path, revision: str = "a" * 40) -> Path:
    """models--org--name/{blobs,refs/main,snapshots/<rev>/<file> -> ../../blobs/<hash>} like a real download."""
    root = cache / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / revision
    (root / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(revision)
    for i, file in enumerate(sorted(folder.iterdir())):
        blob = root / "blobs" / f"{i:064x}"
        shutil.copyfile(file, blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / file.name)
    return snapshot


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("a download was attempted while offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    return cache


def test_hub_id_loads_from_the_offline_cache(hf_tiny, tokens, tmp_path, offline_cache):
    hf_tiny.save_pretrained(tmp_path / "download")
    assert "gpt2" in HUB_IDS and not is_hub_cached("gpt2")
    snapshot = write_hub_cache(offline_cache, "openai-community/gpt2", tmp_path / "download")
    assert is_hub_cached("gpt2") and is_hub_cached("openai-community/gpt2")
    assert cached_snapshot("gpt2") == snapshot
    model, info = load("gpt2", device="cpu")
    assert info.name == "gpt2" and info.format == "hub, safetensors"
    assert info.trained is True and info.status == "trained"  # a published model, by its id
    assert Path(info.path).parent == snapshot
    assert_same_logits(model, hf_tiny, tokens)


def test_hub_legacy_cache_name_and_sharded_snapshot(hf_tiny, tokens, tmp_path, offline_cache):
    """Caches made before GPT-2 moved to openai-community/ use models--gpt2."""
    hf_tiny.save_pretrained(tmp_path / "download", max_shard_size="60KB")
    write_hub_cache(offline_cache, "gpt2", tmp_path / "download")
    assert is_hub_cached("gpt2") and not is_hub_cached("gpt2-medium")
    model, info = load("openai-community/gpt2", device="cpu")
    assert info.format == "hub, sharded safetensors"
    assert_same_logits(model, hf_tiny, tokens)


def test_hub_snapshot_with_only_pickled_weights_is_not_used(hf_tiny, tmp_path, offline_cache):
    folder = tmp_path / "download"
    folder.mkdir()
    hf_tiny.config.to_json_file(folder / "config.json")
    torch.save(hf_tiny.state_dict(), folder / "pytorch_model.bin")
    write_hub_cache(offline_cache, "openai-community/gpt2", folder)
    assert not is_hub_cached("gpt2")
    with pytest.raises(LoadError, match="not cached"):
        load("gpt2", device="cpu")


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """An HTTP server on 127.0.0.1 answering the hub's file protocol (HEAD/GET .../resolve/<rev>/<file>
    with X-Repo-Commit, ETag, X-Error-Code) from a folder, so that the real huggingface_hub client
    downloads through it. The internet is out of reach here; this is the hub's protocol, locally."""
    import hashlib
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()

    class Hub(http.server.BaseHTTPRequestHandler):
        def answer(self, with_body: bool):
            repo, _, rest = self.path.partition("/resolve/")
            root = served if repo.strip("/") == "openai-community/gpt2" else served / "repos" / repo.strip("/")
            file = root / rest.partition("/")[2]
            if not root.is_dir() or not file.is_file():
                self.send_response(404)
                self.send_header("X-Error-Code", "RepoNotFound" if not root.is_dir() else "EntryNotFound")
                self.end_headers()
                return
            data = file.read_bytes()
            self.send_response(200)
            self.send_header("X-Repo-Commit", "c" * 40)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if with_body:
                self.wfile.write(data)

        def do_HEAD(self):
            self.answer(False)

        def do_GET(self):
            self.answer(True)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    yield served
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_hub_download_with_progress_then_offline_from_cache(hf_tiny, tokens, local_hub, monkeypatch):
    """No model.safetensors on the 'hub', so the index and its shards are fetched; bytes are reported."""
    hf_tiny.save_pretrained(local_hub, max_shard_size="60KB")
    assert not is_hub_cached("gpt2")
    calls = []
    model, info = load("gpt2", progress=lambda *a: calls.append(a), device="cpu")
    assert info.format == "hub, sharded safetensors" and is_hub_cached("gpt2")
    assert_same_logits(model, hf_tiny, tokens)
    shard = sorted(local_hub.glob("model-*.safetensors"))[0]
    reports = [c for c in calls if c[2] == f"downloading {shard.name}"]
    assert reports and reports[-1][:2] == (shard.stat().st_size, shard.stat().st_size)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the second time needs no network at all
    assert_same_logits(load("gpt2", device="cpu")[0], hf_tiny, tokens)
    with pytest.raises(LoadError, match="no model 'openai-community/nonexistent' on the hub"):
        monkeypatch.delenv("HF_HUB_OFFLINE")
        load("openai-community/nonexistent", device="cpu")


def test_hub_download_fetches_a_repos_own_tokenizer_but_not_gpt2s(hf_tiny, tokens, local_hub):
    """Another org's model comes with the tokenizer it was trained with (JSON files only); GPT-2's
    repositories do not (its BPE ships offline), and a repo without one is no error."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from gptcore.io.loading import load_tokenizer

    hf_tiny.save_pretrained(local_hub)
    (local_hub / "tokenizer.json").write_text("{}")  # would fail to load if it were ever used
    repo = local_hub / "repos" / "someone" / "tiny-gpt2"
    hf_tiny.save_pretrained(repo)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["Every effort moves you to the right place."] * 3,
                            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(repo / "tokenizer.json"))
    model, info = load("someone/tiny-gpt2", device="cpu")
    assert info.tokenizer.kind == "folder" and Path(info.tokenizer.path).parent == Path(info.path).parent
    assert load_tokenizer(info)[0].encode("Every effort") == tok.encode("Every effort").ids
    assert info.trained is None  # a hub repo proves nothing about its weights; the published ones do
    assert_same_logits(model, hf_tiny, tokens)
    _, gpt2 = load("gpt2", device="cpu")
    assert gpt2.tokenizer.kind != "folder" and not (Path(gpt2.path).parent / "tokenizer.json").exists()
    assert gpt2.trained is True


def test_download_progress_bridge_reports_bytes_and_cancels():
    from gptcore.io.hub import _progress_bar_class

    calls, stop = [], []
    bar_class = _progress_bar_class(lambda *a: calls.append(a), lambda: bool(stop), "downloading model.safetensors")
    with bar_class(total=1000, initial=100, unit="B", desc="model.safetensors") as bar:  # as huggingface_hub builds it
        bar.update(400)
        bar.update(500)
        stop.append(True)
        with pytest.raises(LoadCancelled):
            bar.update(1)
    assert calls == [(500, 1000, "downloading model.safetensors"), (1000, 1000, "downloading model.safetensors")]


# -- the command line ----------------------------------------------------------------------------

def test_cli_info_describes_the_checkpoint(hf_tiny, tmp_path, capsys):
    hf_tiny.save_pretrained(tmp_path / "tiny")
    assert cli_main(["info", str(tmp_path / "tiny"), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"{hf_tiny.num_parameters():,}" in out
    assert "tied to the token embedding" in out and "2 layers, 4 heads, width 64" in out
    assert "MLP in" in out  # the parameter breakdown follows
    assert "loaded (nothing in the checkpoint says how its weights were made)" in out  # random weights: not "trained"
    assert "no tokenizer for this model: vocab_size 500" in out  # and why token ids, not text
    assert cli_main(["info", str(tmp_path / "missing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
