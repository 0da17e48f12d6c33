"""Labels that are true: a file that is not a checkpoint is named for what it is, and "trained"
is said only with evidence (a published model, training metadata), else "loaded"."""
from __future__ import annotations

import json

import pytest
import torch

from gptcore.io.checkpoints import LoadError, sniff
from gptcore.model.config import GPTConfig, PRESETS, preset_name
from gptcore.io.loading import load
from gptcore.model.gpt import GPT

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

TINY = dict(vocab_size=500, n_positions=32, n_embd=64, n_layer=2, n_head=4)


@pytest.fixture(scope="module")
def hf_tiny():
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY, bos_token_id=0, eos_token_id=0)).eval()


def nanogpt_ckpt(hf, **extra) -> dict:
    state = {}
    for key, t in hf.state_dict().items():
        if key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            t = t.t().contiguous()
        state[key] = t.clone()
    args = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, bias=True, vocab_size=500, dropout=0.0)
    return {"model": state, "model_args": args, **extra}


# -- what a file is -------------------------------------------------------------------------------------

def test_a_text_file_named_ckpt_pt_is_named_as_text_not_as_a_lying_header(tmp_path):
    path = tmp_path / "broken" / "ckpt.pt"
    path.parent.mkdir()
    path.write_text("this is not a checkpoint\nbut some notes\n")
    for source in (path, path.parent):  # the file, or nanoGPT's out_dir holding it
        with pytest.raises(LoadError) as raised:
            load(source, device="cpu")
        text = str(raised.value)
        assert "is not a PyTorch checkpoint (it is text, not a zip or pickle archive" in text
        assert "'this is not a checkpoint'" in text and "header claims" not in text


def test_a_git_lfs_pointer_says_to_fetch_the_weights(tmp_path):
    path = tmp_path / "model.pth"
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 497774208\n")
    with pytest.raises(LoadError, match="Git LFS pointer.*git lfs pull"):
        load(path, device="cpu")


def test_an_html_page_saved_as_pytorch_model_bin_is_named(hf_tiny, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    hf_tiny.config.to_json_file(folder / "config.json")
    (folder / "pytorch_model.bin").write_text("<!DOCTYPE html><html><body>Rate limited</body></html>")
    with pytest.raises(LoadError, match=r"pytorch_model\.bin is not a PyTorch checkpoint \(it is an HTML page"):
        load(folder, device="cpu")


def test_formats_under_the_wrong_suffix(hf_tiny, tmp_path):
    """A zip under .safetensors is named (not "header claims 10^18 bytes"); a safetensors file
    under another suffix is recognised by its content and loads."""
    zipped = tmp_path / "weights.safetensors"
    torch.save(hf_tiny.state_dict(), zipped)
    assert sniff(zipped) == "zip"
    with pytest.raises(LoadError, match="is not a safetensors file but a zip archive.*rename it to end in .pt"):
        load(zipped, n_head=4, device="cpu")
    hf_tiny.save_pretrained(tmp_path / "hf")
    renamed = tmp_path / "weights.bin"
    renamed.write_bytes((tmp_path / "hf" / "model.safetensors").read_bytes())
    assert sniff(renamed) == "safetensors"
    model, info = load(renamed, n_head=4, device="cpu")
    assert info.format.startswith("safetensors") and model.config.n_layer == 2


def test_sniff_tells_each_kind_apart(tmp_path):
    cases = {
        "legacy.pt": lambda p: torch.save({"a": torch.ones(2)}, p, _use_new_zipfile_serialization=False),
        "zip.pt": lambda p: torch.save({"a": torch.ones(2)}, p),
        "x.safetensors": lambda p: safetensors_torch.save_file({"a": torch.ones(2)}, p),
        "notes.txt": lambda p: p.write_text("héllo ✓\n"),
        "empty": lambda p: p.write_bytes(b""),
        "noise": lambda p: p.write_bytes(bytes(range(1, 256)) * 4),
        # 0x80 opens 1 random file in 256: without a known protocol and opcode after it, not a pickle
        "noise80": lambda p: p.write_bytes(b"\x80\x07\x00" + bytes(range(1, 256)) * 4),
        "noise80proto": lambda p: p.write_bytes(b"\x80\x02\xff" + bytes(range(1, 256)) * 4),
    }
    kinds = {}
    for name, write in cases.items():
        write(tmp_path / name)
        kinds[name] = sniff(tmp_path / name)
    assert kinds == {"legacy.pt": "pickle", "zip.pt": "zip", "x.safetensors": "safetensors", "notes.txt": "text",
                     "empty": "empty", "noise": "unknown", "noise80": "unknown", "noise80proto": "unknown"}


# -- "trained" only with evidence -----------------------------------------------------------------------

def test_a_freshly_initialised_hf_folder_is_loaded_not_trained(hf_tiny, tmp_path):
    hf_tiny.save_pretrained(tmp_path / "fresh")
    _, info = load(tmp_path / "fresh", device="cpu")
    assert info.trained is None and info.status == "loaded"
    assert "nothing in the checkpoint" in info.provenance
    assert info.describe()["weights"].startswith("loaded (")


def test_a_folder_made_from_a_published_model_is_trained(hf_tiny, tmp_path):
    """transformers 4.x writes `_name_or_path` into config.json: the model the weights came from."""
    folder = tmp_path / "finetuned"
    hf_tiny.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    for origin, trained in (("openai-community/gpt2", True), ("gpt2-medium", True),
                            ("hf-internal-testing/tiny-random-gpt2", None), ("/home/me/runs/x", None)):
        (folder / "config.json").write_text(json.dumps({**config, "_name_or_path": origin}))
        _, info = load(folder, device="cpu")
        assert info.trained is trained, origin
        if trained:
            assert origin in info.provenance


def test_a_hub_cache_snapshot_of_a_published_model_is_trained_by_path_too(hf_tiny, tmp_path):
    snapshot = tmp_path / "hub" / "models--openai-community--gpt2" / "snapshots" / ("a" * 40)
    hf_tiny.save_pretrained(snapshot)
    _, info = load(snapshot, device="cpu")
    assert info.trained is True and "openai-community/gpt2" in info.provenance
    other = tmp_path / "hub" / "models--someone--gpt2-copy" / "snapshots" / ("b" * 40)
    hf_tiny.save_pretrained(other)
    other_info = load(other, device="cpu")[1]
    assert other_info.trained is None and "someone/gpt2-copy came from the hub" in other_info.provenance


@pytest.mark.parametrize("extra, trained, words", [
    (dict(iter_num=250, best_val_loss=torch.tensor(3.25)), True, "iter_num=250, best_val_loss=3.25"),
    (dict(iter_num=0), False, "before any training step"),
    (dict(iter_num=0, best_val_loss=torch.tensor(6.2)), False, "before any training step"),  # evaluated, not trained
    ({}, None, "nothing in the checkpoint"),
])
def test_nanogpt_training_metadata_decides(hf_tiny, tmp_path, extra, trained, words):
    torch.save(nanogpt_ckpt(hf_tiny, **extra), tmp_path / "ckpt.pt")
    _, info = load(tmp_path / "ckpt.pt", device="cpu")
    assert info.trained is trained and words in info.provenance
    assert info.status == {True: "trained", False: "untrained", None: "loaded"}[trained]


def test_a_bare_state_dict_is_loaded_and_a_wrapped_one_with_an_epoch_is_trained(hf_tiny, tmp_path):
    state = nanogpt_ckpt(hf_tiny)["model"]
    torch.save(state, tmp_path / "bare.pt")
    assert load(tmp_path / "bare.pt", n_head=4, device="cpu")[1].trained is None
    torch.save({"model_state_dict": state, "epoch": 3}, tmp_path / "wrapped.pt")
    _, info = load(tmp_path / "wrapped.pt", n_head=4, device="cpu")
    assert info.trained is True and "epoch=3" in info.provenance
    assert any("only model_state_dict was read; epoch" in w for w in info.warnings)
    fresh = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]).state_dict()  # never stepped: no state
    torch.save({"model_state_dict": state, "optimizer_state_dict": fresh, "epoch": 0}, tmp_path / "before.pt")
    assert load(tmp_path / "before.pt", n_head=4, device="cpu")[1].trained is None  # proves nothing either way


# -- the preset a config equals ------------------------------------------------------------------------

def test_preset_name_names_every_preset_and_nothing_else():
    for name in PRESETS:
        assert preset_name(GPTConfig.preset(name)) == name
        assert preset_name(GPTConfig.preset(name, dropout=0.1)) == name  # a training setting, same model
    assert preset_name(GPTConfig()) == "gpt2"
    assert preset_name(GPT.empty(GPTConfig.preset("gpt2-xl")).config) == "gpt2-xl"
    for changed in (dict(n_layer=47), dict(vocab_size=50304), dict(tie_weights=False), dict(bias=False),
                    dict(ln_placement="post"), dict(block_size=2048)):
        assert preset_name(GPTConfig.preset("gpt2-xl", **changed)) is None, changed
