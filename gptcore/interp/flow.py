"""Information-flow routes (Ferrando & Voita 2024, "Information Flow Routes"; Meta's LLM
Transparency Tool): how much each part of a block's update shaped the vector it produced.

At layer l, position i, the attention block writes resid_mid = resid_pre + Σ_{j,h} z[i,j,h] + b_O,
with one part per source token j and head h:

    z[i, j, h] = A^h[i, j] · (v^h_j W_O^h),   v^h_j = LN1(x_j) W_V^h + b_V^h

(the value bias rides inside v, so it is counted once: Σ_j A^h[i, j] = 1; the output bias b_O is
in the whole and in no part). The MLP block writes resid_post = resid_mid + mlp_out. A part's share
of its whole is its proximity in L1, floored and normalised over the parts of that whole:

    share(part) = max(‖whole‖₁ − ‖whole − part‖₁, 1e-5) / Σ_parts (same)

Every (source, head) of the T × nh grid is a part, as in that tool: a source after the target (the
causal mask) or a head whose output was replaced on this run (`gptcore.ablate`, or any hook that
rewrites `attn.hook_z`) sits at the floor, its replacement counted in the whole like a bias.

How it differs from activation patching (interp/patching.py): patching asks "what changes if this
activation took its value from another prompt", one forward per cell and a contrastive prompt to
write; routes ask "which parts is this vector made of", read from ONE forward of the prompt alone
(the paper reports about 100x cheaper than patching). A large share is proximity, not proven
cause: a part can be large yet cancelled downstream. `remove_edge_effect` (flow_effects.py) closes
the gap for one edge by re-running the model without it.

Read entirely from hook points (`hook_resid_pre`, `attn.hook_v`, `attn.hook_pattern`,
`attn.hook_z`, `hook_resid_mid`, `hook_mlp_out`, `hook_resid_post`) and each attention's own value
and output maps, so rotary positions, grouped-query attention (a value head shared by its group),
RMSNorm and SwiGLU models need nothing special, and an ablation active on the model is reflected
(the ablated head's shares at the floor, everything downstream recomputed).

Memory: the T × T × nh × C parts are never held at once: each layer is done while the forward
passes it, in query blocks of at most CHUNK_ELEMENTS elements (32 MiB in float32).

On a GPU nothing is read back per layer (issue 37: five waits per layer made routes at 32 tokens 3.3x
a forward on an H200): the shares stay on the device and come to the CPU in one transfer at the end,
unless they would take more than DEVICE_RESULT_BYTES there (long prompts: then per layer, as the
work per layer dwarfs a wait). On the CPU the shares are written straight into the result's arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gptcore.errors import UserError
from gptcore.interp.probes.incremental import in_one_transfer
from gptcore.interp.targets import Ids, as_ids

FLOOR = 1e-5  # the floor of a raw share, as the paper's tool has it
CHUNK_ELEMENTS = 1 << 23  # the (rows, sources, nh, C) differences materialised at once
QUERY_BLOCKS = 8  # at least this many query blocks: block b reads sources 0..its last row, so the
# causal triangle's empty half is mostly skipped (8 blocks compute 56 % of the T x T square)
DEVICE_RESULT_BYTES = 256 << 20  # the (L, T, T, nh) shares kept on a GPU until the forward ends, at most
# On a GPU a prompt of typing length is launch-bound, not compute-bound: one query block per layer (no
# triangle skipping), and larger blocks within this many elements (256 MiB in float32) when it is long.
DEVICE_CHUNK_ELEMENTS = 1 << 26


class FlowError(UserError):
    """Routes cannot be computed for this input; the message names the problem and the fix."""

    title = "Routes not computable"


@dataclass(frozen=True)
class FlowContributions:
    """Shares of every part in every block of one prompt (float32, numpy, on the CPU).

    For each (layer, target i): attn[l, i].sum() + attn_residual[l, i] == 1, and
    mlp[l, i] + mlp_residual[l, i] == 1."""

    attn: np.ndarray  # (L, T, T, nh) [layer, target i, source j, head]
    attn_residual: np.ndarray  # (L, T) the share of resid_pre in resid_mid
    mlp: np.ndarray  # (L, T) the share of mlp_out in resid_post
    mlp_residual: np.ndarray  # (L, T) the share of resid_mid in resid_post
    tokens: np.ndarray  # (T,) int64 the prompt's token ids
    replaced_heads: tuple[tuple[int, int], ...] = ()  # (layer, head) whose output a hook replaced (ablated)
    logits: torch.Tensor | None = None  # (T - logits_from, vocab) torch, on the model's device: the same forward's
    logits_from: int = 0  # logits, when asked; FlowState recomputes rows from logits_from on, so they start there

    @property
    def n_layer(self) -> int:
        return self.attn.shape[0]

    @property
    def n_tokens(self) -> int:
        return self.attn.shape[1]

    @property
    def n_head(self) -> int:
        return self.attn.shape[3]


def check_flow_model(model) -> None:
    """Routes need attention parts and a residual stream that is their sum (pre-LN GPT-2 layout)."""
    cfg = model.config
    if cfg.n_layer < 1:
        raise FlowError("this model has 0 layers, so there are no attention or MLP parts to trace; "
                        "load or build a model with at least one layer")
    if getattr(cfg, "ln_placement", "pre") != "pre" or not getattr(cfg, "residual", True):
        raise FlowError(f"routes need a pre-LN residual model (GPT-2's layout): with post-LN or no residual "
                        f"a block's output is not the sum of its parts. This model has "
                        f"ln_placement={cfg.ln_placement!r}, residual={cfg.residual}; use a pre-LN residual model")


def check_prompt(model, ids: Ids) -> torch.Tensor:
    """(1, T) ids with T >= 2 (one token has no other token to read from)."""
    idx = as_ids(model, ids)  # (1, T)
    if idx.shape[1] < 2:
        raise FlowError("routes need a prompt of at least 2 tokens (with one token there is no other token "
                        "to read from); type a longer prompt")
    return idx


def attention_shares(pattern: torch.Tensor, v: torch.Tensor, W_O: torch.Tensor, resid_pre: torch.Tensor,
                     resid_mid: torch.Tensor, replaced: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's attention shares for the target rows start..start+n-1, float32.

    pattern (nh, n, S) (those rows, S sources), v (S, nh, hs) (already one value head per query
    head), W_O (C, nh, hs), resid_pre / resid_mid (n, C), replaced (nh,) bool -> ((n, S, nh) shares,
    (n,) residual share). A row needs only its own pattern row, residuals and the values of the
    sources up to it (causal), which is what lets flow_incremental.py compute new rows only."""
    return shares_of_parts(pattern, value_parts(v, W_O), resid_pre, resid_mid, replaced, start)


def value_parts(v: torch.Tensor, W_O: torch.Tensor) -> torch.Tensor:
    """v (S, nh, hs), W_O (C, nh, hs) -> (S, nh, C): each source's value through each head's output
    map (a part is its pattern weight times this). Computed once per layer, shared by its rows."""
    return torch.einsum("tnd,cnd->tnc", v, W_O)  # (S, nh, C)


def shares_of_parts(pattern: torch.Tensor, u: torch.Tensor, resid_pre: torch.Tensor, resid_mid: torch.Tensor,
                    replaced: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`attention_shares` with the value parts u (S, nh, C) given (`value_parts`): rows
    start..start+n-1 read sources up to themselves only, so one row at `start` = i costs i + 1 sources."""
    nh, n, S = pattern.shape
    C = u.shape[-1]
    whole_norm = resid_mid.abs().sum(-1)  # (n,)
    raw = torch.full((n, S, nh), FLOOR, dtype=torch.float32, device=pattern.device)  # (n, S, nh)
    rows = query_rows(S, nh * C, pattern.device)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        s1 = start + r1  # sources up to the block's last target
        a = pattern[:, r0:r1, :s1].permute(1, 2, 0)  # (r, s1, nh)
        diff = torch.addcmul(resid_mid[r0:r1, None, None, :], a[..., None], u[None, :s1], value=-1.0)  # (r, s1, nh, C)
        dist = diff.abs_().sum(-1)  # (r, s1, nh); 3-4x faster than vector_norm(ord=1) on CPU, same sums
        raw[r0:r1, :s1] = (whole_norm[r0:r1, None, None] - dist).clamp_min(FLOOR)
    future = torch.ones(n, S, dtype=torch.bool, device=raw.device).triu(1 + start)  # (n, S) source after target
    # masked_fill, not raw[mask] = …: indexing by a mask reads it back to the host (a wait on a GPU)
    raw.masked_fill_(future[:, :, None], FLOOR)
    raw.masked_fill_(replaced, FLOOR)  # (nh,) over every (target, source)
    resid_raw = (whole_norm - (resid_mid - resid_pre).abs().sum(-1)).clamp_min(FLOOR)  # (n,)
    total = raw.sum(dim=(1, 2)) + resid_raw  # (n,)
    return raw / total[:, None, None], resid_raw / total


def query_rows(S: int, per_source: int, device: torch.device) -> int:
    """Target rows per query block. CPU: >= QUERY_BLOCKS blocks within CHUNK_ELEMENTS (block b reads
    sources 0..its last row, so ~56 % of the square is computed). Elsewhere (launch-bound at typing
    lengths): as few blocks as DEVICE_CHUNK_ELEMENTS allows. Every row's shares are the same numbers
    whichever blocks they fall in."""
    if _on_host(device):
        return max(1, min(CHUNK_ELEMENTS // (S * per_source), -(-S // QUERY_BLOCKS)))
    return max(1, DEVICE_CHUNK_ELEMENTS // (S * per_source))


def two_part_shares(part: torch.Tensor, other: torch.Tensor, whole: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, C) each -> the two (T,) shares of `part` and `other` in `whole`."""
    whole_norm = whole.abs().sum(-1)  # (T,)
    a = (whole_norm - (whole - part).abs().sum(-1)).clamp_min(FLOOR)  # (T,)
    b = (whole_norm - (whole - other).abs().sum(-1)).clamp_min(FLOOR)  # (T,)
    return a / (a + b), b / (a + b)


class _FlowTaps:
    """Hooks that compute each layer's shares while the forward passes it, then drop its tensors.

    attn.hook_z gets two hooks: one first in line (prepend) keeps z as the attention computed it,
    one last compares, so a head whose output an ablation (or any hook) replaced is known exactly."""

    def __init__(self, model, T: int, start: int = 0, kv_cache=None):
        """Rows start..T-1 of a prompt of T tokens (all of them unless a KVCache holds the rest)."""
        cfg = model.config
        self.model = model
        self.group = cfg.n_head // cfg.kv_heads
        self.start, self.kv_cache = start, kv_cache
        L, nh = cfg.n_layer, cfg.n_head
        self.attn = np.zeros((L, T, T, nh), dtype=np.float32)  # rows before `start` are the caller's to fill
        self.attn_residual = np.zeros((L, T), dtype=np.float32)
        self.mlp = np.zeros((L, T), dtype=np.float32)
        self.mlp_residual = np.zeros((L, T), dtype=np.float32)
        self.replaced = np.zeros((L, nh), dtype=bool)
        # Where the hooks write: these arrays themselves on the CPU; on another device, tensors there,
        # brought over by finish() (the attention shares per layer instead, when too large to keep there).
        device = model.device
        self.here = _on_host(device)
        keep_attn = self.here or self.attn.nbytes <= DEVICE_RESULT_BYTES
        self.out = {name: torch.from_numpy(a) if self.here else torch.zeros(a.shape, dtype=torch.from_numpy(a).dtype,
                                                                            device=device)
                    for name, a in self._arrays().items() if name != "attn" or keep_attn}
        self.seen: dict[tuple[int, str], torch.Tensor] = {}
        self.handles = []

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"attn": self.attn, "attn_residual": self.attn_residual, "mlp": self.mlp,
                "mlp_residual": self.mlp_residual, "replaced": self.replaced}

    def finish(self) -> None:
        """The shares into the result's arrays: one transfer from the device (nothing to do on the CPU)."""
        if self.here:
            return
        names = list(self.out)
        got = in_one_transfer(*(self.out[name].float() for name in names))  # replaced: exact 0.0 / 1.0
        arrays = self._arrays()
        for name, tensor in zip(names, got):
            arrays[name][...] = tensor.numpy() if name != "replaced" else tensor.numpy() > 0

    def attach(self) -> None:
        hd = self.model.hook_dict
        for l in range(self.model.config.n_layer):
            keep = {"resid_pre": f"blocks.{l}.hook_resid_pre", "v": f"blocks.{l}.attn.hook_v",
                    "pattern": f"blocks.{l}.attn.hook_pattern", "mlp_out": f"blocks.{l}.hook_mlp_out"}
            for key, name in keep.items():
                self.handles.append(hd[name].register_forward_hook(self._keeper(l, key)))
            z = hd[f"blocks.{l}.attn.hook_z"]
            self.handles.append(z.register_forward_hook(self._keeper(l, "z_raw", clone=True), prepend=True))
            self.handles.append(z.register_forward_hook(self._z_final(l)))
            self.handles.append(hd[f"blocks.{l}.hook_resid_mid"].register_forward_hook(self._attn_done(l)))
            self.handles.append(hd[f"blocks.{l}.hook_resid_post"].register_forward_hook(self._mlp_done(l)))

    def replaced_heads(self) -> tuple[tuple[int, int], ...]:
        return tuple((int(l), int(h)) for l, h in zip(*np.nonzero(self.replaced)))

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.seen.clear()

    def _keeper(self, l: int, key: str, clone: bool = False):
        def keep(_module, _inputs, out):
            t = out[0].detach()
            self.seen[l, key] = t.clone() if clone else t

        return keep

    def _z_final(self, l: int):
        def compare(_module, _inputs, out):  # out (1, T, nh, hs)
            raw = self.seen.pop((l, "z_raw"))  # (T, nh, hs)
            self.out["replaced"][l] = (raw != out[0]).any(dim=2).any(dim=0)  # (nh,)

        return compare

    def _attn_done(self, l: int):
        def done(_module, _inputs, out):  # out (1, T, C)
            attn = self.model.blocks[l].attn
            C = out.shape[-1]
            v = self.seen.pop((l, "v"))  # (n, nkv, hs) the new rows' values
            if self.kv_cache is not None:  # every source's, kept and new: the layer has just written them
                v = self.kv_cache.v[l, 0, :, : self.start + v.shape[0]].transpose(0, 1)  # (T, nkv, hs)
            v = v.float().repeat_interleave(self.group, dim=1)  # (T, nh, hs)
            W_O = attn.c_proj.weight.detach().float().view(C, attn.n_head, attn.head_dim)  # (C, nh, hs)
            pattern = self.seen.pop((l, "pattern")).float()  # (nh, n, T) the new rows
            mid = out[0].detach().float()  # (T, C)
            self.seen[l, "mid"] = mid
            replaced = self.out["replaced"][l]  # (nh,) on the device
            shares, resid = attention_shares(pattern, v, W_O, self.seen.pop((l, "resid_pre")).float(), mid, replaced,
                                             self.start)
            if "attn" in self.out:
                self.out["attn"][l, self.start:] = shares
            else:  # too large to keep on the device until the end
                self.attn[l, self.start:] = shares.cpu().numpy()
            self.out["attn_residual"][l, self.start:] = resid

        return done

    def _mlp_done(self, l: int):
        def done(_module, _inputs, out):  # out (1, T, C)
            mid = self.seen.pop((l, "mid"))
            m, r = two_part_shares(self.seen.pop((l, "mlp_out")).float(), mid, out[0].detach().float())
            self.out["mlp"][l, self.start:] = m
            self.out["mlp_residual"][l, self.start:] = r

        return done


def _on_host(device: torch.device) -> bool:
    """Whether the taps write the shares straight into the result's (CPU) arrays; elsewhere they gather
    on the device (one place, so a test can take that route on the CPU)."""
    return device.type == "cpu"


def tapped_forward(model, idx: torch.Tensor, start: int = 0, kv_cache=None, logits: bool = False):
    """One forward of `idx` (1, n), the prompt's tokens from `start` on (the earlier ones' keys and
    values in `kv_cache`), with the taps on: (taps holding rows start.., logits (n, vocab) or None)."""
    taps = _FlowTaps(model, start + idx.shape[1], start, kv_cache)
    taps.attach()
    try:
        out = model(idx, kv_cache=kv_cache, logits="all" if logits else None)  # (1, n, vocab) or None
    finally:
        taps.detach()
    taps.finish()
    return taps, (out[0] if logits else None)


@torch.no_grad()
def information_flow(model, ids: Ids, *, logits: bool = False) -> FlowContributions:
    """The shares of every attention part (source token × head), MLP and residual in every block
    of `model` on the prompt `ids` (a list of ids or a (T,) / (1, T) tensor), from one forward.
    `logits=True` also keeps that forward's logits (a caller that shows predictions beside the
    routes saves a second forward through every block).

    Honours hooks active on the model (e.g. inside `gptcore.ablate(...)`). Raises FlowError (a
    UserError) for a 0-layer or post-LN model and a prompt of fewer than 2 tokens."""
    check_flow_model(model)
    idx = check_prompt(model, ids)  # (1, T)
    taps, out = tapped_forward(model, idx, logits=logits)
    return FlowContributions(attn=taps.attn, attn_residual=taps.attn_residual, mlp=taps.mlp,
                             mlp_residual=taps.mlp_residual, tokens=idx[0].cpu().numpy().astype(np.int64),
                             replaced_heads=taps.replaced_heads(), logits=out)
