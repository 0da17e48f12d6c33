"""Parameter accounting in closed form: no tensor is allocated, so the config panel can
call it on every keystroke, even for gpt2-xl.

The numbers people quote for "GPT-2's size" differ by convention (tied or untied head,
with or without the position table), so every figure here says which convention it is.
A property test checks `total` against `sum(p.numel() for p in GPT(cfg).parameters())`.
"""
from __future__ import annotations

from dataclasses import dataclass

from gptcore.model.config import GPTConfig

# Bytes per element for the dtypes a user can pick; names as torch prints them too.
DTYPE_BYTES = {
    "fp32": 4, "float32": 4, "torch.float32": 4,
    "bf16": 2, "bfloat16": 2, "torch.bfloat16": 2,
    "fp16": 2, "float16": 2, "torch.float16": 2,
    "fp64": 8, "float64": 8, "torch.float64": 8,
    "int8": 1, "torch.int8": 1,
}

# Display order of the breakdown, matching the order data flows through the model.
COMPONENTS = (
    "token embedding",
    "position embedding",
    "attention qkv",
    "attention output",
    "MLP in",
    "MLP out",
    "layer norms",
    "final norm",
    "output head",
)


@dataclass(frozen=True)
class ComponentCount:
    name: str
    per_block: int  # parameters in one block (0 for components outside the blocks)
    total: int  # summed over all blocks (or the single instance)
    in_blocks: bool


@dataclass(frozen=True)
class ParamCount:
    """All the figures for one config.

    total          unique parameters: with a tied head the shared matrix counts once
                   (what `sum(p.numel() for p in model.parameters())` gives).
    tied_total     the same config with the head tied to the token embedding.
    untied_total   the same config with a separate output head (vocab × n_embd more).
    non_embedding  nanoGPT's convention: total minus the position-embedding table only.
                   The token embedding stays in because, tied, it is also the output
                   head, which does real compute. (Kaplan et al. exclude both tables;
                   that figure is `total - token - position` from `by_component`.)
    by_component   one ComponentCount per entry of COMPONENTS; "output head" is 0 when tied.
    """

    config: GPTConfig
    total: int
    tied_total: int
    untied_total: int
    non_embedding: int
    by_component: dict[str, ComponentCount]
    per_block: int

    @property
    def tied(self) -> bool:
        return self.config.tie_weights

    @property
    def tie_saving(self) -> int:
        """How many parameters tying saves: exactly vocab_size × n_embd."""
        return self.untied_total - self.tied_total

    def memory_bytes(self, dtype="fp32") -> int:
        """Bytes for the weights alone in `dtype`."""
        return self.total * dtype_bytes(dtype)

    def training_bytes(self, dtype="fp32", optimizer_dtype="fp32") -> int:
        """Weights + gradients (in `dtype`) + Adam's two moments (in `optimizer_dtype`).

        Activations are left out: they depend on batch and sequence length, not the config.
        """
        return self.total * (2 * dtype_bytes(dtype) + 2 * dtype_bytes(optimizer_dtype))


def dtype_bytes(dtype) -> int:
    key = str(dtype)
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16, fp64")
    return DTYPE_BYTES[key]


def _norm_size(cfg: GPTConfig) -> int:
    """One norm: weight, plus a bias for a LayerNorm with cfg.bias (as nanoGPT); RMSNorm has none."""
    return cfg.n_embd * (2 if cfg.norm == "layernorm" and cfg.bias else 1)


def _block_components(cfg: GPTConfig) -> dict[str, int]:
    d, h = cfg.n_embd, cfg.d_mlp
    bias = 1 if cfg.bias else 0
    qkv_out = d + 2 * cfg.kv_dim  # queries (n_head heads) + keys and values (kv_heads heads each)
    mlp_in_matrices = 2 if cfg.mlp == "swiglu" else 1  # SwiGLU: up and gate
    return {
        "attention qkv": d * qkv_out + (qkv_out if cfg.use_qkv_bias else 0),
        "attention output": d * d + d * bias,
        "MLP in": mlp_in_matrices * (d * h + h * bias),
        "MLP out": h * d + d * bias,
        "layer norms": 2 * _norm_size(cfg),
    }


def count_parameters(cfg: GPTConfig) -> ParamCount:
    d, L = cfg.n_embd, cfg.n_layer
    block = _block_components(cfg)
    per_block = sum(block.values())
    token = cfg.vocab_size * d
    position = cfg.block_size * d if cfg.pos_embedding == "learned" else 0  # sinusoids/rotary: computed
    final_norm = _norm_size(cfg)
    head = 0 if cfg.tie_weights else token

    comps: dict[str, ComponentCount] = {}
    for name in COMPONENTS:
        if name in block:
            comps[name] = ComponentCount(name, block[name], block[name] * L, True)
    comps["token embedding"] = ComponentCount("token embedding", 0, token, False)
    comps["position embedding"] = ComponentCount("position embedding", 0, position, False)
    comps["final norm"] = ComponentCount("final norm", 0, final_norm, False)
    comps["output head"] = ComponentCount("output head", 0, head, False)
    comps = {name: comps[name] for name in COMPONENTS}

    tied_total = token + position + per_block * L + final_norm
    untied_total = tied_total + token
    total = untied_total if not cfg.tie_weights else tied_total
    return ParamCount(
        config=cfg,
        total=total,
        tied_total=tied_total,
        untied_total=untied_total,
        non_embedding=total - position,
        by_component=comps,
        per_block=per_block,
    )


def modern_differences(cfg: GPTConfig) -> list[str]:
    """For the config panel: what each modern option changes in the count, next to its number.

    Each line compares `cfg` with the same config where that one option is GPT-2's (learned
    positions, LayerNorm, GELU MLP of mlp_ratio × n_embd, one key/value head per query head), so
    every figure is exact and the line says what it is relative to. GPT-2's own config gives []."""
    total = count_parameters(cfg).total

    def delta(**gpt2_option) -> str:
        diff = total - count_parameters(cfg.replace(**gpt2_option)).total
        return f"{'+' if diff > 0 else '−' if diff < 0 else '±'}{abs(diff):,}"

    lines = []
    if cfg.pos_embedding != "learned":
        why = "fixed sin/cos added, no table" if cfg.pos_embedding == "sinusoidal" else             f"queries and keys rotated, base {cfg.rope_theta:g}; no table"
        lines.append(f"{cfg.pos_embedding}: {delta(pos_embedding='learned')} vs learned ({why})")
    if cfg.norm == "rmsnorm":
        n_norms = 2 * cfg.n_layer + 1
        why = f"{n_norms} norms without bias" if cfg.bias else "no bias either way, as bias=False"
        lines.append(f"rmsnorm: {delta(norm='layernorm')} vs layernorm ({why})")
    if cfg.mlp == "swiglu":
        lines.append(f"swiglu: {delta(mlp='gelu')} vs gelu (a third matrix, the gate: "
                     f"{cfg.n_embd:,} × {cfg.d_mlp:,} per block)")
    if cfg.mlp_hidden is not None:
        ratio_hidden = int(round(cfg.mlp_ratio * cfg.n_embd))
        lines.append(f"mlp_hidden {cfg.mlp_hidden:,}: {delta(mlp_hidden=None)} vs mlp_ratio × n_embd "
                     f"= {cfg.mlp_ratio:g} × {cfg.n_embd:,} = {ratio_hidden:,}")
    if cfg.bias and not cfg.use_qkv_bias:  # the book's qkv_bias=False; GPT-2 and HF count these biases
        qkv = cfg.n_embd + 2 * cfg.kv_dim
        per = f"3 × {cfg.n_embd:,}" if cfg.kv_dim == cfg.n_embd else f"{qkv:,}"
        lines.append(f"qkv_bias off: {delta(qkv_bias=None)} vs GPT-2 with its query/key/value biases, as Hugging "
                     f"Face counts it ({cfg.n_layer} layers × {per} = {cfg.n_layer * qkv:,}; the book's "
                     f"GPT_CONFIG_124M has qkv_bias=False)")
    if cfg.kv_heads != cfg.n_head:
        group = cfg.n_head // cfg.kv_heads
        lines.append(f"grouped-query {cfg.n_head}/{cfg.kv_heads}: K and V projections ×1/{group}: "
                     f"{delta(n_kv_head=None)} vs {cfg.n_head} key/value heads "
                     f"(KV cache ×1/{group} too)")
    return lines


def format_count(n: int) -> str:
    """Human figure: 124.44M, 1.56B, 5.2K."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def format_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def breakdown_table(count: ParamCount) -> str:
    """Plain-text table for the command line: per block, total, share of the whole."""
    rows = [f"{'component':<20}{'per block':>14}{'total':>16}{'share':>8}"]
    for comp in count.by_component.values():
        per = f"{comp.per_block:,}" if comp.in_blocks else "-"
        share = 100.0 * comp.total / count.total if count.total else 0.0
        label = comp.name + (" (tied)" if comp.name == "output head" and count.tied else "")
        rows.append(f"{label:<20}{per:>14}{comp.total:>16,}{share:>7.1f}%")
    rows.append("-" * 58)
    rows.append(f"{'total (unique)':<20}{count.per_block:>14,}{count.total:>16,}")
    return "\n".join(rows)
