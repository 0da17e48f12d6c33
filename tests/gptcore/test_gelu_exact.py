"""nanoGPT's exact GELU: a config field (GPT-2's tanh stays the default and stays out of GPT-2's
dicts), used by the MLP, and set when a nanoGPT ckpt.pt is loaded, so a trained-like nanoGPT model
gives nanoGPT's logits (the tanh approximation would not)."""
from __future__ import annotations

import pytest
import torch

from gptcore import GPT, ConfigError, GPTConfig, load
from gptcore.model.config import describe_parts

from nanogpt_oracle import NanoGPTShaped

ARGS = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=True, vocab_size=23, dropout=0.0)


def test_activation_field_default_validation_and_description():
    assert GPTConfig().activation == "gelu_tanh"
    assert "activation" not in GPTConfig().to_dict()  # GPT-2's dict is as before the field existed
    exact = GPTConfig(activation="gelu")
    assert exact.to_dict()["activation"] == "gelu" and GPTConfig.from_dict(exact.to_dict()) == exact
    with pytest.raises(ConfigError) as info:
        GPTConfig(activation="relu")
    assert info.value.field == "activation" and "'gelu_tanh'" in str(info.value)
    assert "GELU (exact) MLP" in describe_parts(exact) and "exact" not in describe_parts(GPTConfig())


def test_mlp_applies_the_configured_gelu():
    seen = {}
    for activation in ("gelu", "gelu_tanh"):
        model = GPT(GPTConfig(**{k: v for k, v in ARGS.items()}, activation=activation), seed=0).eval()
        mlp = model.blocks[0].mlp
        with model.hooks([("blocks.0.mlp.hook_pre", lambda t, hook: seen.__setitem__("pre", t)),
                              ("blocks.0.mlp.hook_post", lambda t, hook: seen.__setitem__("post", t))]):
            model(torch.arange(8)[None])
        expected = torch.nn.GELU(approximate="none" if activation == "gelu" else "tanh")(seen["pre"])
        assert torch.equal(seen["post"], expected), activation
        assert mlp.approximate == ("none" if activation == "gelu" else "tanh")


def _trained_like_oracle() -> NanoGPTShaped:
    """Random weights scaled so MLP inputs reach |x| ~ 1-4, where erf and tanh GELU part ways (as
    trained weights do; at init scale the two agree to ~1e-6 and a test could not tell them apart)."""
    torch.manual_seed(0)
    oracle = NanoGPTShaped(**ARGS)
    with torch.no_grad():
        for name, p in oracle.named_parameters():
            if name.endswith("mlp.c_fc.weight"):
                p.normal_(0, 0.6)
            elif name.endswith("mlp.c_proj.weight"):
                p.normal_(0, 0.4)
            elif p.dim() == 2:
                p.normal_(0, 0.2)
    return oracle.eval()


def test_nanogpt_checkpoint_loads_with_exact_gelu(tmp_path):
    oracle = _trained_like_oracle()
    torch.save({"model": oracle.state_dict(), "model_args": ARGS, "iter_num": 2000, "best_val_loss": 1.42,
                "config": {}}, tmp_path / "ckpt.pt")
    model, info = load(tmp_path / "ckpt.pt", device="cpu")
    assert info.config.activation == "gelu" and "GELU (exact)" in info.describe()["parts"]
    idx = torch.randint(23, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = oracle(idx)
        got = model(idx)
        tanh_model = GPT(info.config.replace(activation="gelu_tanh"), init=None)
        tanh_model.load_state_dict(model.state_dict())
        tanh = tanh_model.eval()(idx)
    assert (got - want).abs().max() <= 1e-5
    assert (tanh - want).abs().max() > 1e-4  # the bound above would catch the tanh approximation


def test_hf_config_asking_for_exact_gelu_gets_it(tmp_path):
    """transformers' activation_function "gelu" is the exact form: loaded with it, no warning."""
    pytest.importorskip("transformers")
    from hf_oracle import random_hf

    hf = random_hf(1, activation_function="gelu").eval()
    with torch.no_grad():
        for block in hf.transformer.h:
            block.mlp.c_fc.weight.mul_(8.0)  # MLP inputs where erf and tanh GELU differ
    hf.save_pretrained(tmp_path / "hf")
    model, info = load(tmp_path / "hf", device="cpu")
    assert info.config.activation == "gelu" and not any("activation" in w for w in info.warnings)
    idx = torch.randint(101, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = hf(idx).logits
        assert (model(idx) - want).abs().max() <= 1e-5
        tanh_model = GPT(info.config.replace(activation="gelu_tanh"), init=None)
        tanh_model.load_state_dict(model.state_dict())
        assert (tanh_model.eval()(idx) - want).abs().max() > 1e-4
