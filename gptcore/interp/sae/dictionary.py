"""Feature dictionaries over one hook point: a TopK sparse autoencoder, and a layer's MLP neurons.

Both read a hook's activation per token, a vector of `d_in` numbers, and give `width` feature
activations; `decode` maps feature activations back to the hook's space. A browser, `sae_edit`
and `sae_metrics` treat them alike, so the neuron view works the moment a model is open and an SAE
is a drop-in once trained.

`SAE` keeps SAELens's TopK names and semantics on raw activations: W_enc (d_in, width), b_enc
(width), W_dec (width, d_in), b_dec (d_in); encode = the k largest of (x - b_dec) @ W_enc + b_enc,
ReLU, zeros elsewhere; decode = f @ W_dec + b_dec. Any input scaling used in training is folded
into these weights, so a file written here means the same in SAELens.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gptcore.errors import UserError


class SAEError(UserError):
    """An SAE, its settings or its data cannot be used; the message says why and what to do."""

    title = "Sparse autoencoder not usable"


class SAE(nn.Module):
    """A TopK sparse autoencoder over the activations of one hook point (`hook`, "" if unknown)."""

    def __init__(self, d_in: int, width: int, k: int, hook: str = "", dtype: torch.dtype = torch.float32):
        super().__init__()
        check_shape(d_in, width, k)
        self.W_enc = nn.Parameter(torch.zeros(d_in, width, dtype=dtype))  # (d_in, width)
        self.b_enc = nn.Parameter(torch.zeros(width, dtype=dtype))  # (width,)
        self.W_dec = nn.Parameter(torch.zeros(width, d_in, dtype=dtype))  # (width, d_in)
        self.b_dec = nn.Parameter(torch.zeros(d_in, dtype=dtype))  # (d_in,)
        self.k = int(k)
        self.hook = hook
        self.metadata: dict = {}  # how it was made (tokens, seed, ...); saved in cfg.json's metadata

    @property
    def d_in(self) -> int:
        return self.W_enc.shape[0]

    @property
    def width(self) -> int:
        return self.W_enc.shape[1]

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., width): what the top-k selection ranks."""
        return (x.to(self.W_enc.dtype) - self.b_dec) @ self.W_enc + self.b_enc

    def encode_topk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., d_in) -> values, indices (..., k): the k active latents of each row, ReLU'd,
        without a dense (N, width) result (a browser wants these, not a mostly-zero matrix)."""
        values, indices = self.pre_acts(x).topk(self.k, dim=-1, sorted=False)  # (..., k)
        return values.relu(), indices

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_in) -> (..., width): the k largest pre-activations, ReLU'd; zeros elsewhere."""
        values, indices = self.encode_topk(x)
        dense = x.new_zeros(*x.shape[:-1], self.width, dtype=values.dtype)  # (..., width)
        return dense.scatter_(-1, indices, values)

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """(..., width) -> (..., d_in)."""
        return f.to(self.W_dec.dtype) @ self.W_dec + self.b_dec

    def decode_topk(self, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """values, indices (..., k) -> (..., d_in): a sum of k decoder rows per token (an
        embedding bag), never a dense (N, width) product."""
        lead = values.shape[:-1]
        rows = F.embedding_bag(indices.reshape(-1, indices.shape[-1]), self.W_dec,
                               per_sample_weights=values.reshape(-1, values.shape[-1]).to(self.W_dec.dtype),
                               mode="sum")  # (N, d_in)
        return (rows + self.b_dec).reshape(*lead, self.d_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode_topk(*self.encode_topk(x))

    def feature_acts(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """(N, d_in), features (m,) -> (N, m): those latents' activations (0 where not in the top k)."""
        values, indices = self.encode_topk(x)  # (N, k)
        hit = indices[:, :, None] == features.to(indices.device)[None, None, :]  # (N, k, m)
        return (hit * values[:, :, None]).sum(1)  # (N, m)

    def directions(self, features: torch.Tensor) -> torch.Tensor:
        """features (m,) -> (m, d_in): what one unit of each feature adds to the hook's activation."""
        return self.W_dec[features]

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, width={self.width}, k={self.k}, hook={self.hook!r}"


class NeuronDictionary(nn.Module):
    """A layer's MLP neurons as features: the identity dictionary over `blocks.{l}.mlp.hook_post`.

    encode(x) = x (every neuron, signed: GELU outputs can be negative), decode(f) = f, so the error
    term is zero and an edit sets the neuron itself. Weights are never materialised: a browser asks
    for `directions` of the few features it shows."""

    def __init__(self, d_in: int, hook: str):
        super().__init__()
        self.hook = hook
        self._d_in = int(d_in)
        self.k = self._d_in

    @property
    def d_in(self) -> int:
        return self._d_in

    @property
    def width(self) -> int:
        return self._d_in

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def encode_topk(self, x: torch.Tensor, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The k most active neurons per row (default all)."""
        return x.topk(k or self._d_in, dim=-1, sorted=False)

    def decode_topk(self, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        dense = values.new_zeros(*values.shape[:-1], self._d_in)  # (..., d_in)
        return dense.scatter_(-1, indices, values)

    def feature_acts(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return x[:, features.to(x.device)]  # (N, m)

    def directions(self, features: torch.Tensor) -> torch.Tensor:
        return torch.eye(self._d_in)[features]  # (m, d_in)

    def extra_repr(self) -> str:
        return f"neurons={self._d_in}, hook={self.hook!r}"


def neuron_dictionary(model, layer: int) -> NeuronDictionary:
    """The identity dictionary over layer `layer`'s MLP neurons (`blocks.{layer}.mlp.hook_post`)."""
    n_layer = model.config.n_layer
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layer:
        raise SAEError(f"layer {layer!r} does not exist: this model has layers 0..{n_layer - 1}")
    hook = f"blocks.{layer}.mlp.hook_post"
    if hook not in model.hook_dict:
        raise SAEError(f"this model has no {hook} hook point, so its neurons cannot be read")
    return NeuronDictionary(model.config.d_mlp, hook)


def check_shape(d_in, width, k) -> None:
    """Positive integer sizes and 0 < k < width, else SAEError naming the fix."""
    for name, value in (("d_in", d_in), ("width", width), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SAEError(f"{name} must be a positive integer, got {value!r}")
    if k >= width:
        raise SAEError(f"k={k} must be smaller than width={width}: k is how many of the width latents "
                       "stay active per token; choose a wider SAE or a smaller k")
