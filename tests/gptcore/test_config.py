"""GPTConfig: the published preset shapes, derived sizes, and validation that names the
field and says how to fix it."""
import dataclasses
import math

import pytest

from gptcore import ConfigError, GPTConfig, PRESETS

# (n_layer, n_head, n_embd) from the HF config.json files of the OpenAI checkpoints.
PUBLISHED = {
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
    "distilgpt2": (6, 12, 768),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_has_published_shape(name):
    cfg = GPTConfig.preset(name)
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd) == PUBLISHED[name]
    assert (cfg.vocab_size, cfg.block_size) == (50257, 1024)
    assert cfg.head_dim == 64 and cfg.d_mlp == 4 * cfg.n_embd
    assert (cfg.bias, cfg.use_qkv_bias, cfg.tie_weights) == (True, True, True)
    assert (cfg.ln_placement, cfg.residual, cfg.dropout, cfg.layer_norm_eps) == ("pre", True, 0.0, 1e-5)


def test_every_preset_is_pinned():
    assert set(PRESETS) == set(PUBLISHED)


def test_preset_aliases_overrides_and_unknown_name():
    assert GPTConfig.preset("openai-community/gpt2-xl") == GPTConfig.preset("gpt2-xl")
    cfg = GPTConfig.preset("gpt2", n_layer=3, tie_weights=False)
    assert (cfg.n_layer, cfg.n_embd, cfg.tie_weights) == (3, 768, False)
    with pytest.raises(ConfigError) as err:
        GPTConfig.preset("gpt5")
    assert err.value.field == "preset" and "gpt2-medium" in str(err.value)
    with pytest.raises(ConfigError) as err:  # overrides are validated like anything else
        GPTConfig.preset("gpt2", n_head=7)
    assert err.value.field == "n_head"


def test_qkv_bias_none_follows_bias_and_can_be_set_alone():
    assert GPTConfig(bias=True).use_qkv_bias is True
    assert GPTConfig(bias=False).use_qkv_bias is False
    assert GPTConfig(bias=True, qkv_bias=False).use_qkv_bias is False
    assert GPTConfig(bias=False, qkv_bias=True).use_qkv_bias is True


def test_derived_sizes():
    cfg = GPTConfig(n_embd=96, n_head=6, mlp_ratio=2.5)
    assert cfg.head_dim == 16 and cfg.d_mlp == 240


def test_frozen_replace_and_dict_roundtrip():
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, qkv_bias=False, ln_placement="post", residual=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layer = 3
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(n_layer=5).n_layer == 5
    with pytest.raises(ConfigError) as err:  # replace re-validates
        cfg.replace(n_embd=33)
    assert err.value.field == "n_head"
    with pytest.raises(ConfigError) as err:
        GPTConfig.from_dict({**cfg.to_dict(), "n_layers": 2})
    assert err.value.field == "n_layers" and "n_layer" in str(err.value)


# (field, value, words the message must contain: the problem and the way out)
INVALID = [
    ("n_embd", 770, ["not divisible", "n_head", "e.g."]),  # 770 % 12 != 0, reported on n_head
    ("n_layer", 0, ["positive"]),
    ("n_layer", -3, ["positive"]),
    ("n_head", 0, ["positive"]),
    ("n_embd", -768, ["positive"]),
    ("vocab_size", 0, ["positive"]),
    ("block_size", -1, ["positive"]),
    ("n_layer", 2.0, ["whole number"]),
    ("n_layer", True, ["whole number"]),
    ("n_embd", "768", ["whole number"]),
    ("n_layer", 10_000, ["absurdly large", "typo"]),
    ("n_embd", 7_680_000, ["absurdly large", "typo"]),
    ("vocab_size", 10**9, ["absurdly large", "typo"]),
    ("block_size", 10**7, ["absurdly large", "typo"]),
    ("n_head", 12_000, ["absurdly large", "typo"]),
    ("dropout", 1.0, ["[0, 1)", "0.1"]),
    ("dropout", -0.1, ["[0, 1)", "0.1"]),
    ("dropout", math.nan, ["[0, 1)"]),
    ("dropout", True, ["[0, 1)"]),
    ("dropout", "0.1", ["[0, 1)"]),
    ("mlp_ratio", 0, ["GPT-2 uses 4"]),
    ("mlp_ratio", -4, ["GPT-2 uses 4"]),
    ("mlp_ratio", 1000, ["GPT-2 uses 4"]),
    ("mlp_ratio", math.nan, ["GPT-2 uses 4"]),
    ("mlp_ratio", "4", ["GPT-2 uses 4"]),
    ("mlp_ratio", 4.001, ["whole number"]),  # 4.001 × 768 is not a whole number of units
    ("ln_placement", "middle", ["'pre'", "'post'"]),
    ("ln_placement", None, ["'pre'"]),
    ("bias", "yes", ["True or False"]),
    ("bias", 1, ["True or False"]),
    ("tie_weights", None, ["True or False"]),
    ("residual", 0, ["True or False"]),
    ("qkv_bias", "no", ["True, False or None"]),
    ("layer_norm_eps", 0, ["1e-5"]),
    ("layer_norm_eps", 2.0, ["1e-5"]),
]


@pytest.mark.parametrize("field,value,words", INVALID, ids=[f"{f}={v!r}" for f, v, _ in INVALID])
def test_invalid_value_names_field_and_fix(field, value, words):
    with pytest.raises(ConfigError) as err:
        GPTConfig(**{field: value})
    exc = err.value
    assert isinstance(exc, ValueError)
    expected_field = "n_head" if "not divisible" in words else field
    assert exc.field == expected_field
    message = str(exc)
    assert message.startswith(expected_field + ":")
    for word in words:
        assert word in message, (word, message)


def test_divisibility_suggestion_is_a_real_fix():
    with pytest.raises(ConfigError) as err:
        GPTConfig(n_embd=100, n_head=7)
    suggested = int(str(err.value).split("e.g. ")[1].split(")")[0])
    assert GPTConfig(n_embd=100, n_head=suggested).head_dim * suggested == 100


def test_boundary_values_are_accepted():
    GPTConfig(n_layer=1, n_head=1, n_embd=1, vocab_size=1, block_size=1, dropout=0.0, mlp_ratio=1)
    GPTConfig(dropout=0.999, mlp_ratio=0.5, n_embd=768, n_head=12)
    GPTConfig(n_layer=512)  # the limit itself is allowed


# -- the modern parts ----------------------------------------------------------------------------

def test_modern_defaults_are_gpt2_and_roundtrip():
    cfg = GPTConfig()
    assert (cfg.pos_embedding, cfg.norm, cfg.mlp, cfg.mlp_hidden, cfg.n_kv_head) == ("learned", "layernorm", "gelu", None, None)
    assert cfg.kv_heads == 12 and cfg.kv_dim == 768 and cfg.d_mlp == 3072
    modern = GPTConfig(n_head=9, n_embd=576, n_kv_head=3, pos_embedding="rope", rope_theta=100000.0,
                       norm="rmsnorm", mlp="swiglu", mlp_hidden=1536, bias=False)
    assert modern.kv_heads == 3 and modern.kv_dim == 192 and modern.d_mlp == 1536
    assert GPTConfig.from_dict(modern.to_dict()) == modern
    assert {"pos_embedding", "rope_theta", "norm", "mlp", "mlp_hidden", "n_kv_head"} <= set(modern.to_dict())
    # a GPT-2 config's dict is unchanged by the new options (saved settings and forms compare equal)
    assert not {"pos_embedding", "rope_theta", "norm", "mlp", "mlp_hidden", "n_kv_head"} & set(cfg.to_dict())
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    sinus = cfg.replace(pos_embedding="sinusoidal")
    assert sinus.to_dict() == {**cfg.to_dict(), "pos_embedding": "sinusoidal"}
    assert GPTConfig.from_dict(sinus.to_dict()) == sinus


# (overrides, field named, words of the fix)
INVALID_MODERN = [
    (dict(pos_embedding="alibi"), "pos_embedding", ["'learned'", "'rope'"]),
    (dict(norm="batchnorm"), "norm", ["'rmsnorm'"]),
    (dict(mlp="relu"), "mlp", ["'swiglu'"]),
    (dict(pos_embedding="rope", n_head=4, n_embd=12), "pos_embedding", ["odd", "n_embd=16", "'sinusoidal'"]),
    (dict(pos_embedding="sinusoidal", n_head=1, n_embd=7), "pos_embedding", ["odd", "even n_embd"]),
    (dict(rope_theta=0), "rope_theta", ["10000"]),
    (dict(rope_theta="10000"), "rope_theta", ["10000"]),
    (dict(n_kv_head=5), "n_kv_head", ["not divisible", "[1, 2, 3, 4, 6, 12]"]),
    (dict(n_kv_head=16), "n_kv_head", ["at most 12"]),
    (dict(n_kv_head=0), "n_kv_head", ["positive"]),
    (dict(n_kv_head=2.0), "n_kv_head", ["whole number"]),
    (dict(mlp_hidden=0), "mlp_hidden", ["positive"]),
    (dict(mlp_hidden=1.5), "mlp_hidden", ["whole number"]),
]


@pytest.mark.parametrize("overrides,field,words", INVALID_MODERN, ids=[str(o) for o, _, _ in INVALID_MODERN])
def test_impossible_modern_combinations_name_the_fix(overrides, field, words):
    with pytest.raises(ConfigError) as err:
        GPTConfig(**overrides)
    assert err.value.field == field
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_suggested_rope_width_is_a_real_fix():
    with pytest.raises(ConfigError) as err:
        GPTConfig(pos_embedding="rope", n_head=4, n_embd=12)
    suggested = int(str(err.value).split("n_embd=")[-1].split(")")[0])
    assert GPTConfig(pos_embedding="rope", n_head=4, n_embd=suggested).head_dim % 2 == 0
