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
        again, info = load(str(folder))
        reloaded = again(x)
    assert (hf - ours).abs().max() < 1e-5
    assert (reloaded - ours).abs().max() < 1e-5
    assert again.config.activation == activation and again.config.n_head == 4
    assert info.tokenizer.kind == "char"  # the run's characters travel with the folder


def test_parts_gpt2_cannot_hold_are_refused_before_writing(tmp_path):
    model = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=16, norm="rmsnorm",
                          pos_embedding="rope"), init="gpt2", seed=0)
    with pytest.raises(ExportError, match="rope positions.*rmsnorm.*ckpt.pt instead"):
        save_hf_folder(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
