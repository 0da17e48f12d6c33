"""Closed-form parameter accounting checked against the published GPT-2 sizes and against
the real module tree (built on the meta device, so nothing is allocated)."""
import re
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st

from gptcore import GPTConfig, count_parameters
from gptcore.model.gpt import GPT
from gptcore.model.params import COMPONENTS, breakdown_table, dtype_bytes, format_bytes, format_count, modern_differences

# HF `model.num_parameters()` of the OpenAI checkpoints (tied head counted once).
PUBLISHED_TOTALS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "distilgpt2": 81_912_576,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTALS))
def test_published_totals(name):
    count = count_parameters(GPTConfig.preset(name))
    assert count.total == count.tied_total == PUBLISHED_TOTALS[name]
    cfg = count.config
    assert count.untied_total == PUBLISHED_TOTALS[name] + cfg.vocab_size * cfg.n_embd


def test_gpt2_small_tied_and_untied():
    tied = count_parameters(GPTConfig.preset("gpt2"))
    untied = count_parameters(GPTConfig.preset("gpt2", tie_weights=False))
    assert (tied.total, tied.untied_total) == (124_439_808, 163_037_184)
    assert (untied.total, untied.tied_total) == (163_037_184, 124_439_808)
    assert tied.tie_saving == untied.tie_saving == 50257 * 768 == 38_597_376
    assert tied.tied and not untied.tied
    # nanoGPT prints "number of parameters: 123.65M" for gpt2: total minus wpe only.
    assert tied.non_embedding == 124_439_808 - 1024 * 768 == 123_653_376
    assert untied.non_embedding == 163_037_184 - 1024 * 768
    assert tied.by_component["output head"].total == 0
    assert untied.by_component["output head"].total == 50257 * 768


def test_gpt2_small_components_by_hand():
    c = count_parameters(GPTConfig.preset("gpt2")).by_component
    d = 768
    assert list(c) == list(COMPONENTS)
    assert c["attention qkv"].per_block == d * 3 * d + 3 * d
    assert c["attention output"].per_block == d * d + d
    assert c["MLP in"].per_block == d * 4 * d + 4 * d
    assert c["MLP out"].per_block == 4 * d * d + d
    assert c["layer norms"].per_block == 4 * d
    assert c["final norm"].total == 2 * d and not c["final norm"].in_blocks
    for comp in c.values():
        assert comp.total == (comp.per_block * 12 if comp.in_blocks else comp.total)
    assert count_parameters(GPTConfig.preset("gpt2")).per_block == 7_087_872


def test_memory_and_training_bytes():
    count = count_parameters(GPTConfig.preset("gpt2"))
    n = 124_439_808
    assert count.memory_bytes() == count.memory_bytes("fp32") == 4 * n
    assert count.memory_bytes("bf16") == count.memory_bytes(torch.float16) == 2 * n
    assert count.memory_bytes(torch.float64) == 8 * n
    assert count.training_bytes("fp32") == 16 * n  # weights + grads + two Adam moments
    assert count.training_bytes("bf16", optimizer_dtype="fp32") == (2 + 2 + 4 + 4) * n
    assert count_parameters(GPTConfig.preset("gpt2", tie_weights=False)).memory_bytes() == 4 * 163_037_184
    with pytest.raises(ValueError, match="fp32"):
        dtype_bytes("fp12")


def test_formatting_helpers():
    assert format_count(124_439_808) == "124.44M"
    assert format_count(1_557_611_200) == "1.56B"
    assert format_count(5_200) == "5.20K" and format_count(12) == "12"
    assert format_bytes(4 * 124_439_808) == "474.70 MiB"
    assert format_bytes(100) == "100 B"
    table = breakdown_table(count_parameters(GPTConfig.preset("gpt2")))
    for name in COMPONENTS:
        assert name in table
    assert "output head (tied)" in table and "124,439,808" in table


# Which of our parameter names belong to which component of the breakdown.
def _component_of(name: str) -> str:
    if name == "embed.weight":
        return "token embedding"
    if name == "pos_embed.weight":
        return "position embedding"
    if name == "unembed.weight":
        return "output head"
    if name.startswith("ln_final."):
        return "final norm"
    inner = name.split(".", 2)[2]  # blocks.{i}.<inner>
    for prefix, comp in (("attn.c_attn.", "attention qkv"), ("attn.c_proj.", "attention output"),
                         ("mlp.c_fc.", "MLP in"), ("mlp.c_gate.", "MLP in"), ("mlp.c_proj.", "MLP out"),
                         ("ln1.", "layer norms"), ("ln2.", "layer norms")):
        if inner.startswith(prefix):
            return comp
    raise AssertionError(f"parameter {name} belongs to no component")


def _meta_model(cfg: GPTConfig) -> GPT:
    with torch.device("meta"):
        return GPT(cfg, init=None)


@st.composite
def small_configs(draw):
    n_head = draw(st.integers(1, 6))
    pos_embedding = draw(st.sampled_from(["learned", "sinusoidal", "rope"]))
    head_dim = draw(st.integers(1, 8)) * (2 if pos_embedding != "learned" else 1)  # rope/sinusoidal: even
    n_embd = n_head * head_dim
    d_mlp = draw(st.integers(1, 4 * n_embd))
    return GPTConfig(
        pos_embedding=pos_embedding,
        rope_theta=draw(st.sampled_from([10000.0, 500000.0])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        mlp=draw(st.sampled_from(["gelu", "swiglu"])),
        mlp_hidden=draw(st.sampled_from([None, draw(st.integers(1, 3 * n_embd))])),
        n_kv_head=draw(st.sampled_from([None] + [k for k in range(1, n_head + 1) if n_head % k == 0])),
        vocab_size=draw(st.integers(1, 64)),
        block_size=draw(st.integers(1, 32)),
        n_layer=draw(st.integers(1, 4)),
        n_head=n_head,
        n_embd=n_embd,
        bias=draw(st.booleans()),
        qkv_bias=draw(st.sampled_from([None, True, False])),
        tie_weights=draw(st.booleans()),
        mlp_ratio=draw(st.sampled_from([d_mlp / n_embd, 4, 1, 2.5 if n_embd % 2 == 0 else 3])),
        ln_placement=draw(st.sampled_from(["pre", "post"])),
        residual=draw(st.booleans()),
        dropout=draw(st.sampled_from([0.0, 0.1])),
    )


@settings(max_examples=50, deadline=None)
@given(small_configs())
def test_closed_form_matches_the_module_tree(cfg):
    model = _meta_model(cfg)
    assert all(p.device.type == "meta" for p in model.parameters())  # nothing allocated
    count = count_parameters(cfg)
    assert count.total == sum(p.numel() for p in model.parameters()) == model.num_parameters()
    assert sum(c.total for c in count.by_component.values()) == count.total
    measured = dict.fromkeys(COMPONENTS, 0)
    for name, p in model.named_parameters():  # a tied matrix appears once, as embed.weight
        measured[_component_of(name)] += p.numel()
    assert measured == {name: c.total for name, c in count.by_component.items()}
    assert count.per_block == sum(p.numel() for p in model.blocks[0].parameters())
    assert count.tie_saving == cfg.vocab_size * cfg.n_embd
    assert count.total == (count.tied_total if cfg.tie_weights else count.untied_total)
    positions = cfg.block_size * cfg.n_embd if cfg.pos_embedding == "learned" else 0
    assert count.non_embedding == count.total - positions
    # Each explained difference is the exact change in the count (GPT-2's config has none).
    for line in modern_differences(cfg):
        assert re.search(r": [+−±][\d,]+ vs ", line), line


def test_gpt2_small_on_meta_matches_count():
    for tie in (True, False):
        cfg = GPTConfig.preset("gpt2", tie_weights=tie)
        assert _meta_model(cfg).num_parameters() == count_parameters(cfg).total


def test_count_on_gpt2_xl_needs_no_torch():
    """Closed form: counting gpt2-xl imports no torch, so it cannot allocate a tensor."""
    code = (
        "import sys; from gptcore import GPTConfig, count_parameters;"
        "c = count_parameters(GPTConfig.preset('gpt2-xl', tie_weights=False));"
        "assert 'torch' not in sys.modules, 'torch was imported';"
        "print(c.total)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 1_557_611_200 + 50257 * 1600


# SmolLM2-135M's config.json: 30 layers, width 576, 9 heads / 3 key/value heads, SwiGLU 1536,
# RMSNorm, rotary, tied, vocab 49152; its model card and HF `num_parameters()` say 134,515,008.
SMOLLM2 = dict(vocab_size=49152, block_size=8192, n_layer=30, n_head=9, n_embd=576, n_kv_head=3,
               mlp="swiglu", mlp_hidden=1536, norm="rmsnorm", pos_embedding="rope", bias=False, rope_theta=100000)


def test_modern_parts_by_hand():
    d, L = 768, 12
    gpt2 = count_parameters(GPTConfig.preset("gpt2"))
    sinus = count_parameters(GPTConfig.preset("gpt2", pos_embedding="sinusoidal"))
    assert gpt2.total - sinus.total == 1024 * 768 == 786_432  # the lesson's exercise
    assert sinus.by_component["position embedding"].total == 0
    assert sinus.non_embedding == sinus.total
    rms = count_parameters(GPTConfig.preset("gpt2", norm="rmsnorm"))
    assert gpt2.total - rms.total == (2 * L + 1) * d  # one bias per norm
    swiglu = count_parameters(GPTConfig.preset("gpt2", mlp="swiglu"))
    assert swiglu.by_component["MLP in"].per_block == 2 * (d * 4 * d + 4 * d)
    gqa = count_parameters(GPTConfig.preset("gpt2", n_kv_head=4))  # 12 query heads share 4 K/V heads
    assert gqa.by_component["attention qkv"].per_block == d * (d + 2 * 4 * 64) + (d + 2 * 4 * 64)
    smol = count_parameters(GPTConfig(**SMOLLM2))
    assert smol.total == 134_515_008
    assert smol.by_component["layer norms"].per_block == 2 * 576 and smol.by_component["final norm"].total == 576


def test_modern_differences_name_each_option_with_its_number():
    assert modern_differences(GPTConfig.preset("gpt2")) == []
    assert modern_differences(GPTConfig.preset("gpt2", pos_embedding="sinusoidal")) == [
        "sinusoidal: −786,432 vs learned (fixed sin/cos added, no table)"]
    lines = modern_differences(GPTConfig(**SMOLLM2))
    by_option = {line.split(":")[0]: line for line in lines}
    assert set(by_option) == {"rope", "rmsnorm", "swiglu", "mlp_hidden 1,536", "grouped-query 9/3"}
    assert by_option["rope"].startswith("rope: −4,718,592 vs learned")  # 8192 × 576
    assert "±0" in by_option["rmsnorm"]  # bias=False: a LayerNorm would have no bias either
    assert by_option["swiglu"].startswith(f"swiglu: +{30 * 576 * 1536:,} vs gelu")
    # K and V shrink from 9 to 3 heads of 64: 2 × 576 × (576 - 192) per block, no bias
    assert by_option["grouped-query 9/3"].startswith(f"grouped-query 9/3: K and V projections ×1/3: −{30 * 2 * 576 * 384:,}")
    assert by_option["mlp_hidden 1,536"].startswith(f"mlp_hidden 1,536: −{30 * 3 * 576 * (2304 - 1536):,} vs mlp_ratio")


def test_the_books_figures_and_the_qkv_bias_gap_to_hugging_face_are_explained():
    """Issue 23: the book's 163,009,536 (untied) and 124,412,160 (tied) come out with qkv_bias off;
    Hugging Face's 124,439,808 has the 12 × 3 × 768 query/key/value biases; the count says so."""
    book = GPTConfig.preset("gpt2", qkv_bias=False)
    assert count_parameters(book.replace(tie_weights=False)).total == 163_009_536
    assert count_parameters(book).total == 124_412_160
    assert count_parameters(GPTConfig.preset("gpt2")).total == 124_439_808 == 124_412_160 + 12 * 3 * 768
    (line,) = modern_differences(book)
    assert line.startswith("qkv_bias off: −27,648 vs GPT-2") and "Hugging Face" in line
    assert "12 layers × 3 × 768 = 27,648" in line and "qkv_bias=False" in line
