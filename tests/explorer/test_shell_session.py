"""Session: the headless model holder (no Qt)."""
from __future__ import annotations

import pytest
import torch

from explorer.runtime.devices import BuildRefused, build_memory_estimate
from explorer.session.core import Session
from explorer.session.models import load_default
from gptcore.model.config import ConfigError, GPTConfig
from gptcore.model.params import count_parameters

TINY = dict(vocab_size=500, block_size=32, n_layer=2, n_head=2, n_embd=32)


def test_tiny_session_has_a_model_and_tokenizer(tiny_session):
    s = tiny_session
    assert s.has_model and s.version == 1
    assert s.info.n_params == sum(p.numel() for p in s.model.parameters())
    assert s.encode("Every effort moves you") == [6109, 3626, 6100, 345]
    assert s.token_strings([6109, 345]) == ["Every", " you"]


def test_build_swaps_the_model_and_bumps_version(tiny_session):
    before = tiny_session.model
    info = tiny_session.build(TINY, "xavier-normal", seed=1)
    assert tiny_session.model is not before and tiny_session.version == 2
    assert info.n_params == count_parameters(GPTConfig(**TINY)).total
    assert not info.trained and info.config["n_embd"] == 32
    assert tiny_session.model.unembed.weight is tiny_session.model.embed.weight  # tie survives to_empty


def test_build_matches_a_directly_constructed_model(tiny_session):
    tiny_session.build(TINY, "gpt2", seed=7)
    from gptcore.model.gpt import GPT

    direct = GPT(GPTConfig(**TINY), init="gpt2", seed=7)
    for (name, a), (_, b) in zip(tiny_session.model.state_dict().items(), direct.state_dict().items()):
        assert torch.equal(a, b), name


def test_build_rejects_bad_config_and_keeps_the_model(tiny_session):
    before, version = tiny_session.model, tiny_session.version
    with pytest.raises(ConfigError, match="n_head"):
        tiny_session.build({**TINY, "n_head": 3})
    with pytest.raises(ValueError, match="init scheme"):
        tiny_session.build(TINY, "nonsense")
    assert tiny_session.model is before and tiny_session.version == version


def test_fault_build_refused_over_memory_shows_the_estimate(tiny_session):
    huge = GPTConfig(n_layer=512, n_head=64, n_embd=16384)
    before = tiny_session.model
    with pytest.raises(BuildRefused) as err:
        tiny_session.build(huge.to_dict())
    text = str(err.value)
    assert "TiB" in text and f"{count_parameters(huge).total:,}" in text and "smaller" in text
    assert tiny_session.model is before
    assert build_memory_estimate(huge) > count_parameters(huge).memory_bytes("fp32")


def test_fault_nothing_lost_after_a_failed_load(tiny_session, tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x00" * 7)
    before, info, version = tiny_session.model, tiny_session.info, tiny_session.version
    with pytest.raises(Exception):
        tiny_session.load(str(bad))
    assert tiny_session.model is before and tiny_session.info is info and tiny_session.version == version


def test_load_default_offline_builds_labelled_untrained_gpt2_shape(monkeypatch):
    # HF_HUB_OFFLINE=1 and an empty HF_HOME (conftest): GPT-2 small cannot be had.
    s = Session(device="cpu")
    assert not s.has_model and s.version == 0
    info = load_default(s)
    assert s.has_model and s.version == 1
    assert not info.trained and "UNTRAINED" in info.note and "File → Load GPT-2 small" in info.note
    assert info.n_params == count_parameters(GPTConfig.preset("gpt2")).total


def test_fault_superseded_build_never_replaces_the_newer_model(tiny_session):
    """A Build the user superseded (a newer load/build set its cancel flag) may finish its work
    later; it must not install its model over the newer one (checked under the session lock)."""
    from gptcore.io.loading import LoadCancelled

    before, version = tiny_session.model, tiny_session.version
    cfg = GPTConfig(vocab_size=300, block_size=16, n_layer=1, n_head=2, n_embd=16).to_dict()
    with pytest.raises(LoadCancelled, match="superseded"):
        tiny_session.build(cfg, "gpt2", 0, cancel=lambda: True)
    assert tiny_session.model is before and tiny_session.version == version
    info = tiny_session.build(cfg, "gpt2", 0, cancel=lambda: False)  # not superseded: installed
    assert tiny_session.version == version + 1 and info.n_params == tiny_session.model.num_parameters()
