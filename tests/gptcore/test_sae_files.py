"""SAEs on disk in SAELens's layout (issue 33): round trips, the exact folds of SAELens's TopK
options (oracles written here from SAELens's documented encode/decode), pre-6.0 configs, refusals,
and a failed save leaving the folder as it was. (SAELens itself opening our files is checked by
gptcore/benches/sae_lens_check.py, run in an interpreter that has sae-lens.)"""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from gptcore import SAE, SAEError, load_sae, neuron_dictionary, save_sae
from gptcore.interp.sae import files as files_module


def random_sae(d=8, width=32, k=4, hook="blocks.1.hook_resid_post", seed=0):
    gen = torch.Generator().manual_seed(seed)
    sae = SAE(d, width, k, hook=hook).requires_grad_(False)
    for p in sae.parameters():
        p.copy_(torch.randn(p.shape, generator=gen))
    return sae


def write_lens_folder(folder, cfg, tensors):
    """A folder as SAELens's save_model writes one: cfg.json and sae_weights.safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cfg.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "sae_weights.safetensors"))


def lens_cfg(d=8, width=32, k=4, **over):
    cfg = {"d_in": d, "d_sae": width, "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": True,
           "normalize_activations": "none", "reshape_activations": "none",
           "metadata": {"sae_lens_version": "6.54.12", "hook_name": "blocks.0.hook_mlp_out"}, "k": k,
           "rescale_acts_by_decoder_norm": False, "architecture": "topk"}
    return cfg | over


def tensors_of(sae):
    return {n: getattr(sae, n).detach().clone() for n in ("W_enc", "b_enc", "W_dec", "b_dec")}


def test_save_then_load_gives_the_same_sae_in_saelens_layout(tmp_path):
    sae = random_sae()
    sae.metadata = {"training_tokens": 1234}
    save_sae(sae, tmp_path / "sae", model_name="char-2x128")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == "topk" and (cfg["d_in"], cfg["d_sae"], cfg["k"]) == (8, 32, 4)
    assert cfg["metadata"]["hook_name"] == "blocks.1.hook_resid_post" and cfg["metadata"]["model_name"] == "char-2x128"
    assert cfg["apply_b_dec_to_input"] is True and cfg["normalize_activations"] == "none"
    assert set(load_file(str(tmp_path / "sae" / "sae_weights.safetensors"))) == {"W_enc", "b_enc", "W_dec", "b_dec"}
    back = load_sae(tmp_path / "sae")
    assert (back.hook, back.k, back.metadata["training_tokens"]) == (sae.hook, 4, 1234)
    x = torch.randn(10, 8)
    assert torch.equal(back.encode(x), sae.encode(x)) and torch.equal(back(x), sae(x))


def test_a_pre_6_saelens_topk_config_opens(tmp_path):
    sae = random_sae()
    cfg = {"d_in": 8, "d_sae": 32, "hook_point": "blocks.1.hook_resid_pre", "architecture": "standard",
           "activation_fn_str": "topk", "activation_fn_kwargs": {"k": 4}, "apply_b_dec_to_input": True}
    write_lens_folder(tmp_path / "old", cfg, tensors_of(sae))
    back = load_sae(tmp_path / "old")
    assert back.hook == "blocks.1.hook_resid_pre" and back.k == 4
    x = torch.randn(5, 8)
    assert torch.allclose(back(x), sae(x))


def test_saelens_options_fold_exactly_into_plain_weights(tmp_path):
    w = tensors_of(random_sae())
    x = torch.randn(20, 8)

    def lens_encode_decode(apply_b_dec, rescale):  # SAELens TopKSAE.encode/decode, written out
        pre = (x - w["b_dec"] * apply_b_dec) @ w["W_enc"] + w["b_enc"]
        norms = w["W_dec"].norm(dim=1)
        if rescale:
            pre = pre * norms
        vals, idx = pre.topk(4)
        f = torch.zeros(20, 32).scatter_(1, idx, vals.relu())
        return f, (f / norms if rescale else f) @ w["W_dec"] + w["b_dec"]

    for apply_b_dec, rescale in ((False, False), (True, True), (False, True)):
        folder = tmp_path / f"{apply_b_dec}{rescale}"
        write_lens_folder(folder, lens_cfg(apply_b_dec_to_input=apply_b_dec, rescale_acts_by_decoder_norm=rescale), w)
        ours = load_sae(folder)
        f, x_hat = lens_encode_decode(apply_b_dec, rescale)
        assert torch.allclose(ours.encode(x), f, atol=1e-4) and torch.allclose(ours(x), x_hat, atol=1e-4)


@pytest.mark.parametrize("change, words", [
    (dict(architecture="jumprelu"), ["'jumprelu'", "supported: 'topk'"]),
    (dict(architecture="standard"), ["'standard'", "supported: 'topk'"]),
    (dict(normalize_activations="layer_norm"), ["normalize_activations='layer_norm'", "only 'none'"]),
    (dict(reshape_activations="hook_z"), ["reshape_activations"]),
    (dict(d_in=9), ["W_enc is (8, 32)", "d_in=9"]),
    (dict(k=32), ["k=32 must be smaller than width=32"]),
])
def test_unsupported_or_inconsistent_files_are_refused_by_name(tmp_path, change, words):
    write_lens_folder(tmp_path / "x", lens_cfg(**change), tensors_of(random_sae()))
    with pytest.raises(SAEError) as info:
        load_sae(tmp_path / "x")
    for word in words:
        assert word in str(info.value)


def test_missing_files_nan_weights_and_neurons_are_refused(tmp_path):
    with pytest.raises(SAEError, match="lacks cfg.json and sae_weights.safetensors"):
        load_sae(tmp_path)
    w = tensors_of(random_sae())
    w["W_dec"][3, 2] = float("nan")
    write_lens_folder(tmp_path / "nan", lens_cfg(), w)
    with pytest.raises(SAEError, match="W_dec contains NaN"):
        load_sae(tmp_path / "nan")
    with pytest.raises(SAEError, match="neurons need no file"):
        from gptcore import GPT, GPTConfig

        save_sae(neuron_dictionary(GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=1, n_embd=4)), 0),
                 tmp_path / "n")


def test_a_failed_save_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    save_sae(random_sae(seed=1), tmp_path / "s")
    before = {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()}
    import safetensors.torch

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        save_sae(random_sae(seed=2), tmp_path / "s")
    assert {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()} == before
    assert files_module.CFG in before
