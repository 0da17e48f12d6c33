"""A GPT saved as a Hugging Face GPT-2 folder opens in transformers and in gptcore with the same logits."""
from __future__ import annotations

import json

import pytest
import torch

from gptcore.model.config import GPTConfig
from gptcore.io.export_hf import ExportError, save_hf_folder
from gptcore.model.gpt import GPT


@pytest.mark.parametrize("bias,activation,tied", [(False, "gelu", True), (True, "gelu_tanh", False)])
def test_transformers_and_gptcore_read_the_folder_as_the_model_computes(tmp_path, bias, activation, tied):
    transformers = pytest.importorskip("transformers")
    from gptcore.io.loading import load

    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=4, n_embd=32, bias=bias, activation=activation,
                    tie_weights=tied)
    model = GPT(cfg, init="gpt2", seed=0).eval()
    with torch.no_grad():  # weights of a trained-looking model: biases and norms away from their init
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    vocab = tmp_path / "char_vocab.json"
    vocab.write_text(json.dumps({"format": "gptcore-char-vocab-1", "chars": [chr(65 + i) for i in range(50)]}))
    folder = save_hf_folder(model, tmp_path / "hf", extra_files=[vocab])
    x = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        ours = model(x)
        hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()(x).logits
        again, info = load(str(folder), device="cpu")
        reloaded = again(x)
    assert (hf - ours).abs().max() < 1e-5
    assert (reloaded - ours).abs().max() < 1e-5
    assert again.config.activation == activation and again.config.n_head == 4
    assert info.tokenizer.kind == "char"  # the run's characters travel with the folder


@pytest.mark.parametrize("vocab,special", [(65, None), (50304, 50256)])
def test_transformers_loads_the_folder_without_a_warning(tmp_path, vocab, special):
    """A char model's folder once made transformers warn that bos/eos 50256 lie outside its
    65-token vocabulary (issue 27); its logger and Python's warnings must both stay silent."""
    import logging
    import warnings

    transformers = pytest.importorskip("transformers")
    model = GPT(GPTConfig(vocab_size=vocab, block_size=16, n_layer=1, n_head=2, n_embd=16), seed=0).eval()
    folder = save_hf_folder(model, tmp_path / "hf")
    heard = []

    class Collect(logging.Handler):
        def emit(self, record):
            heard.append(record.getMessage())

    logger = transformers.utils.logging.get_logger()  # transformers' root logger ("transformers")
    handler, level = Collect(level=logging.WARNING), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            hf = transformers.GPT2LMHeadModel.from_pretrained(folder)
            hf.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, do_sample=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert not [m for m in heard if "token_id" in m or "vocabulary" in m], heard
    assert (hf.config.bos_token_id, hf.config.eos_token_id) == (special, special)


def test_parts_gpt2_cannot_hold_are_refused_before_writing(tmp_path):
    model = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16, norm="rmsnorm",
                          pos_embedding="rope"), init="gpt2", seed=0)
    with pytest.raises(ExportError, match="rope positions.*rmsnorm.*ckpt.pt instead"):
        save_hf_folder(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
