"""The shape of a GPT-2-class model, with validation that tells the user how to fix it.

Everything else (parameter counts, the model, loading, the config panel) reads a
`GPTConfig`, so bad values are caught here once, with a message naming the field.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gptcore.errors import UserError

# Beyond these the model could not be built on any machine a user of this tool has;
# they exist to turn a typo (an extra zero or three) into a message, not an OOM.
MAX_VOCAB = 1_000_000
MAX_BLOCK = 131_072
MAX_LAYER = 512
MAX_HEAD = 1024
MAX_EMBD = 65_536
MAX_MLP_RATIO = 64

LN_PLACEMENTS = ("pre", "post")
# The parts a model since 2024 swaps into the GPT-2 skeleton; the first of each is GPT-2's.
POS_EMBEDDINGS = ("learned", "sinusoidal", "rope")
NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
# The GELU MLP's nonlinearity: GPT-2 (and HF, the book) use the tanh approximation ("gelu_new");
# nanoGPT's model.py uses torch's exact erf GELU (nn.GELU()). On trained weights they differ
# visibly (a nanoGPT checkpoint: logits 3.25e-3 apart), so a nanoGPT model must keep its own.
ACTIVATIONS = ("gelu_tanh", "gelu")
MAX_ROPE_THETA = 1e9
GPT2_VOCAB = 50257  # ids of the GPT-2 tokenizer; a larger model vocab is padding (nanoGPT: 50304)


class ConfigError(UserError):
    """A config value that cannot build a model; `field` names the offending field."""

    title = "Invalid config"

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.reason = message


def from_known_fields(cls, values: dict, error: type[Exception]):
    """`cls(**values)` for a config dataclass, refusing an unknown key by name with the known ones
    (a saved config from another version, a typo in a command line) before it becomes a TypeError;
    `error(field, message)` is the config's own error (ConfigError, TrainConfigError)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise error(unknown[0], f"not a {cls.__name__} field; known fields are {', '.join(sorted(names))}")
    return cls(**values)


PRESETS: dict[str, dict] = {
    # The published GPT-2 shapes (Radford et al. 2019; HF config.json files).
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": dict(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": dict(n_layer=36, n_head=20, n_embd=1280),
    "gpt2-xl": dict(n_layer=48, n_head=25, n_embd=1600),
    # DistilGPT2: GPT-2 small with half the blocks.
    "distilgpt2": dict(n_layer=6, n_head=12, n_embd=768),
}
PRESET_ALIASES = {
    "openai-community/gpt2": "gpt2",
    "openai-community/gpt2-medium": "gpt2-medium",
    "openai-community/gpt2-large": "gpt2-large",
    "openai-community/gpt2-xl": "gpt2-xl",
    "distilbert/distilgpt2": "distilgpt2",
}


@dataclass(frozen=True)
class GPTConfig:
    """Hyper-parameters of a GPT-2-class decoder.

    `qkv_bias=None` follows `bias`; some textbooks build GPT-2 with every bias on except
    the query/key/value projection, so it can be set on its own. `ln_placement` and
    `residual` exist for teaching (the residual panel): GPT-2 is pre-LN with residuals.

    The modern parts (Llama, Qwen2, SmolLM2 keep GPT-2's skeleton and swap these):
    `pos_embedding` "learned" (GPT-2's table), "sinusoidal" (the original Transformer's fixed
    sin/cos, added like the table) or "rope" (rotary: queries and keys are rotated by position,
    `rope_theta` sets the base of its frequencies); `norm` "layernorm" or "rmsnorm" (weight only,
    never a bias); `mlp` "gelu" or "swiglu" (a third matrix, the gate, as in Llama) with
    `mlp_hidden` overriding `mlp_ratio × n_embd`; `n_kv_head` key/value heads shared by groups of
    query heads (grouped-query attention; None = n_head, ordinary multi-head attention).
    `activation` is the GELU MLP's: "gelu_tanh" (GPT-2's tanh approximation) or "gelu" (the exact
    erf form, nanoGPT's nn.GELU()); SwiGLU ignores it.
    """

    vocab_size: int = GPT2_VOCAB
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    qkv_bias: bool | None = None
    tie_weights: bool = True
    mlp_ratio: float = 4
    ln_placement: str = "pre"
    residual: bool = True
    layer_norm_eps: float = 1e-5
    pos_embedding: str = "learned"
    rope_theta: float = 10000.0
    norm: str = "layernorm"
    mlp: str = "gelu"
    mlp_hidden: int | None = None
    n_kv_head: int | None = None
    activation: str = "gelu_tanh"

    def __post_init__(self):
        self.validate()

    # -- derived -------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def d_mlp(self) -> int:
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        return int(round(self.mlp_ratio * self.n_embd))

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_head, or n_head when every query head has its own."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: kv_heads × head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def use_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else bool(self.qkv_bias)

    # -- construction ----------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides) -> "GPTConfig":
        key = PRESET_ALIASES.get(name, name)
        if key not in PRESETS:
            raise ConfigError("preset", f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[key], **overrides})

    def replace(self, **changes) -> "GPTConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field, except a modern part left at GPT-2's value: a GPT-2 config's dict is what it
        was before those options existed (saved settings, the config panel's form and its preset
        matching compare equal), and `from_dict` fills the defaults back in."""
        values = dataclasses.asdict(self)
        for name in MODERN_FIELDS:
            if values[name] == _GPT2_PARTS[name]:
                del values[name]
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "GPTConfig":
        return from_known_fields(cls, values, ConfigError)

    # -- validation ------------------------------------------------------------------
    def validate(self) -> None:
        _positive_int("vocab_size", self.vocab_size, MAX_VOCAB)
        _positive_int("block_size", self.block_size, MAX_BLOCK)
        _positive_int("n_layer", self.n_layer, MAX_LAYER)
        _positive_int("n_head", self.n_head, MAX_HEAD)
        _positive_int("n_embd", self.n_embd, MAX_EMBD)
        if self.n_embd % self.n_head:
            lower = max(d for d in range(1, self.n_head + 1) if self.n_embd % d == 0)
            raise ConfigError(
                "n_head",
                f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; "
                f"pick n_head dividing n_embd (e.g. {lower}) or change n_embd to a multiple of {self.n_head}",
            )
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not (0.0 <= self.dropout < 1.0):
            raise ConfigError("dropout", f"{self.dropout!r} is outside [0, 1); use e.g. 0.0 (no dropout) or 0.1")
        for name in ("bias", "tie_weights", "residual"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be True or False, got {getattr(self, name)!r}")
        if self.qkv_bias is not None and not isinstance(self.qkv_bias, bool):
            raise ConfigError("qkv_bias", f"must be True, False or None (follow `bias`), got {self.qkv_bias!r}")
        ratio = self.mlp_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (0 < ratio <= MAX_MLP_RATIO):
            raise ConfigError("mlp_ratio", f"{ratio!r} must be a number in (0, {MAX_MLP_RATIO}]; GPT-2 uses 4")
        if abs(ratio * self.n_embd - round(ratio * self.n_embd)) > 1e-6:
            raise ConfigError("mlp_ratio", f"mlp_ratio × n_embd = {ratio * self.n_embd} must be a whole number of MLP units")
        if self.ln_placement not in LN_PLACEMENTS:
            raise ConfigError("ln_placement", f"{self.ln_placement!r} is not one of {LN_PLACEMENTS}; GPT-2 uses 'pre'")
        eps = self.layer_norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (0 < eps < 1):
            raise ConfigError("layer_norm_eps", f"{eps!r} must be in (0, 1); GPT-2 uses 1e-5")
        self._validate_modern_parts()

    def _validate_modern_parts(self) -> None:
        for name, allowed in (("pos_embedding", POS_EMBEDDINGS), ("norm", NORMS), ("mlp", MLPS),
                              ("activation", ACTIVATIONS)):
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(name, f"{value!r} is not one of {allowed}; GPT-2 uses {allowed[0]!r}")
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not (1 < theta <= MAX_ROPE_THETA):
            raise ConfigError("rope_theta", f"{theta!r} must be a number in (1, {MAX_ROPE_THETA:g}]; "
                                            f"the usual base is 10000 (Llama 3 uses 500000)")
        if self.pos_embedding == "rope" and self.head_dim % 2:
            raise ConfigError(
                "pos_embedding",
                f"rotary positions rotate pairs of dimensions, but head_dim = n_embd / n_head = {self.head_dim} "
                f"is odd; pick n_embd and n_head with an even quotient (e.g. n_embd={self.n_head * (self.head_dim + 1)}) "
                f"or use pos_embedding='learned' or 'sinusoidal'",
            )
        if self.pos_embedding == "sinusoidal" and self.n_embd % 2:
            raise ConfigError("pos_embedding", f"sinusoidal positions pair a sine with a cosine, but n_embd={self.n_embd} "
                                               f"is odd; use an even n_embd or pos_embedding='learned'")
        if self.mlp_hidden is not None:
            _positive_int("mlp_hidden", self.mlp_hidden, MAX_MLP_RATIO * self.n_embd)
        if self.n_kv_head is not None:
            _positive_int("n_kv_head", self.n_kv_head, MAX_HEAD)
            if self.n_kv_head > self.n_head:
                raise ConfigError("n_kv_head", f"{self.n_kv_head} key/value heads but only n_head={self.n_head} query "
                                               f"heads; use at most {self.n_head} (or None for one per query head)")
            if self.n_head % self.n_kv_head:
                options = [d for d in range(1, self.n_head + 1) if self.n_head % d == 0]
                raise ConfigError("n_kv_head", f"n_head={self.n_head} is not divisible by n_kv_head={self.n_kv_head}: "
                                               f"each key/value head serves a whole group of query heads; "
                                               f"pick one of {options}")


MODERN_FIELDS = ("pos_embedding", "rope_theta", "norm", "mlp", "mlp_hidden", "n_kv_head", "activation")
_GPT2_PARTS = {f.name: f.default for f in dataclasses.fields(GPTConfig) if f.name in MODERN_FIELDS}


def describe_parts(cfg: GPTConfig) -> str:
    """One line naming the parts a config uses, e.g. for `gptcore info` and the status bar."""
    positions = {"learned": "learned positions", "sinusoidal": "sinusoidal positions",
                 "rope": f"rotary positions (base {cfg.rope_theta:g})"}[cfg.pos_embedding]
    norm = "RMSNorm" if cfg.norm == "rmsnorm" else "LayerNorm"
    gelu = "GELU (exact)" if cfg.activation == "gelu" else "GELU"  # tanh: GPT-2's, the unmarked default
    mlp = f"{'SwiGLU' if cfg.mlp == 'swiglu' else gelu} MLP {cfg.d_mlp:,}"
    heads = (f"grouped-query attention {cfg.n_head}/{cfg.kv_heads}" if cfg.kv_heads != cfg.n_head
             else f"{cfg.n_head}-head attention")
    return f"{positions}, {norm}, {mlp}, {heads}"


def _positive_int(name: str, value, upper: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"must be a whole number, got {value!r}")
    if value <= 0:
        raise ConfigError(name, f"must be positive, got {value}")
    if value > upper:
        raise ConfigError(name, f"{value:,} is absurdly large (limit {upper:,}); check for a typo")


def preset_name(config: GPTConfig) -> str | None:
    """The preset `config` equals ("gpt2-xl"), or None: lets the app name a built model by its
    preset instead of by its shape. Every field counts except `dropout`, a training setting that
    leaves the model itself (its parameters, its eval-mode outputs) unchanged."""
    bare = config.replace(dropout=0.0)
    return next((name for name in PRESETS if GPTConfig.preset(name) == bare), None)
