"""Llama q/k/v stacked into c_attn through one shared buffer (convert._stack_rows_each): a model whose
q/k/v come to over 4 MB takes the huge-page path that the tiny parity models never reach. Checked
against HF on the same random weights (each c_attn is exactly HF's q, k, v rows; logits equal), in
fp32 and bf16 files, and a NaN in one layer's k_proj is still refused, naming that layer's c_attn.
"""
import pytest
import torch

from gptcore import load
from gptcore.io.checkpoints import LoadError
from gptcore.io.convert import _stack_rows_each

transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

# 16 layers x (256² + 2·128·256) values = 8.4 MB of q/k/v in fp32, 4.2 MB in bf16: over the 4 MB where
# the shared buffer starts
SHAPE = dict(vocab_size=97, hidden_size=256, intermediate_size=64, num_hidden_layers=16, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1,
             tie_word_embeddings=False, attn_implementation="eager")


def _saved(folder, dtype=torch.float32):
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SHAPE)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.2 * torch.randn(p.shape))
    hf = hf.to(dtype)
    hf.save_pretrained(folder)
    return hf


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_large_qkv_stacked_equal_hf_rows_and_logits(tmp_path, dtype):
    hf = _saved(tmp_path, dtype)
    ours, _ = load(tmp_path, device="cpu", dtype=dtype)
    attn_weights = [ours.blocks[i].attn.c_attn.weight for i in range(SHAPE["num_hidden_layers"])]
    assert sum(w.nbytes for w in attn_weights) >= 4 << 20
    for i, weight in enumerate(attn_weights):
        sa = hf.model.layers[i].self_attn
        expected = torch.cat([sa.q_proj.weight, sa.k_proj.weight, sa.v_proj.weight])  # (C + 2·nkv·hs, C)
        assert weight.dtype == dtype and torch.equal(weight, expected), i
    tokens = torch.tensor([[5, 17, 3, 88, 41, 2, 9]])  # (1, T)
    with torch.inference_mode():
        diff = (ours(tokens).float() - hf(tokens).logits.float()).abs().max()
    assert diff < (1e-4 if dtype == torch.float32 else 0.1), float(diff)


def test_nan_in_one_k_proj_of_a_large_model_is_refused_by_layer(tmp_path):
    _saved(tmp_path)
    state = {k: v.clone() for k, v in load_file(tmp_path / "model.safetensors").items()}
    state["model.layers.7.self_attn.k_proj.weight"][4, :3] = float("nan")
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LoadError, match="NaN/Inf") as raised:
        load(tmp_path, device="cpu")
    message = str(raised.value)
    assert "blocks.7.attn.c_attn.weight (3 of" in message and "blocks.6" not in message


def test_groups_of_mixed_dtypes_and_odd_sizes_stack_like_cat():
    """Each group's view starts aligned whatever came before (odd bf16 sizes, then fp32)."""
    g = torch.Generator().manual_seed(0)
    groups = [
        [torch.randn(3, generator=g).bfloat16(), torch.randn(1, generator=g).bfloat16()],  # 8 bytes
        [torch.randn(1100, 512, generator=g), torch.randn(900, 512, generator=g)],  # 4 MB: the shared buffer
        [torch.randn(5, 7, generator=g).half(), torch.randn(2, 7, generator=g).half()],
        [torch.randn(6, dtype=torch.float64, generator=g), torch.randn(1, dtype=torch.float64, generator=g)],
    ]
    stacked = _stack_rows_each(groups)
    for parts, got in zip(groups, stacked):
        assert got.dtype == parts[0].dtype and torch.equal(got, torch.cat(parts))
    stacked[1].add_(1)  # writable, and no group overlaps another
    for parts, got in zip(groups, stacked):
        assert torch.equal(got, torch.cat(parts) + (1 if got is stacked[1] else 0))
