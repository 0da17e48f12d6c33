"""CUDA graphs for the token loop: the static decode step captured once per shape, replayed per token.

Why: decoding GPT-2 small launches a few hundred small kernels per token. Launched one by one
from Python they took 4.5 ms a token on an H200 (222 tok/s) where reading the weights once takes
0.13 ms (issue 37): the GPU waited on the launches. A CUDA graph launches the whole step at once.
It needs every shape and address fixed, which the static KV cache (model/kv_cache.py) gives the
forward and TokenPicker (picking.py) the choice of the token.

What is kept: per model (held weakly: a model that goes takes its graphs with it) ONE captured
step (one sequence), for its dtype, block size and weights, with its KV cache and the picks captured for
the sampling settings used with it (the newest few). Weights are keyed by their storage: a graph
reads parameters by address, so an in-place edit (a training step shown, `load_state_dict`) is
read by the next replay as it should be, while a replaced tensor (another model, `assign=True`)
makes the next generation capture again. The step holds the tensors it was captured with, so a
replacement during a generation can never leave it reading freed memory. The first generation for
a shape pays the capture (warm-up on a side stream, then capture), reported with its first token
(GenerationStep.capture_s) and logged; the next one only replays.

When not: `acquire` raises GraphsUnavailable with the reason (a CPU; another generation using this
model's step now; a forward hook attached when a capture would be needed, since its Python would
run in the warm-up and its ops be captured; a capture that failed, logged as a warning once per
shape) and the generation runs the plain path. Hooks attached while a kept step serves are the
decoder's business (decoders.py): it asks before every token and takes the plain path while one is.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch

from gptcore.generation.picking import TokenPicker
from gptcore.model.hooks import HookWatch
from gptcore.model.kv_cache import StaticKVCache

log = logging.getLogger(__name__)

WARMUP_STEPS = 2  # eager runs on a side stream before capture: cuBLAS handles, workspaces, lazy inits
MAX_PICKS = 8  # captured picks kept per step (one per sampling setting used; the oldest go first)

_steps: "weakref.WeakKeyDictionary[torch.nn.Module, CapturedStep]" = weakref.WeakKeyDictionary()
_failed: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()  # model -> (key, reason)
_lock = threading.Lock()


class GraphsUnavailable(RuntimeError):
    """The captured step cannot serve this generation; the message says why."""


def shape_key(model) -> tuple:
    """What a captured step is valid for: device, dtype, block size and the weights' storage (one sequence:
    the captured forward reads row 0)."""
    return (str(model.device), model.dtype, model.config.block_size,
            tuple(p.data_ptr() for p in model.parameters()))


@dataclass
class CapturedPick:
    picker: TokenPicker
    graph: object | None  # torch.cuda.CUDAGraph, or None: this pick runs eagerly (logged why)
    packed: torch.Tensor | None  # the captured pick's output, read after each replay


class CapturedStep:
    """One model's decode step captured as a CUDA graph, with the buffers it reads and writes:
    `token` (1, 1) and `static.position` in, the KV cache in place, `logits` (V,) out."""

    def __init__(self, model, key: tuple):
        self.key = key
        self.device = model.device
        self.weights = list(model.parameters())  # held: a graph must never read freed memory
        self.cache = model.new_kv_cache(1, zeroed=True)  # zeroed: masked slots meet 0 · value, never NaN
        self.static = StaticKVCache(self.cache)
        self.token = torch.zeros(1, 1, dtype=torch.long, device=self.device)  # (1, 1)
        self.picks: OrderedDict[tuple, CapturedPick] = OrderedDict()
        self.busy = False

        def forward():
            return model(self.token, kv_cache=self.static, logits="last")[0, -1]  # (V,)

        self.graph, self.logits = _capture(forward, self.device)

    def replay(self) -> torch.Tensor:
        """The step for `token` at `static.position`: keys and values written, logits (V,) out."""
        self.graph.replay()
        return self.logits

    def pick_for(self, settings: dict) -> tuple[CapturedPick, float]:
        """The pick for these sampling settings (TokenPicker's keywords): kept, else captured now
        reading this step's `logits`; returns it and the seconds a capture took (0 when kept)."""
        key = TokenPicker.settings_key(**settings)
        kept = self.picks.get(key)
        if kept is not None:
            self.picks.move_to_end(key)
            return kept, 0.0
        start = time.perf_counter()
        picker = TokenPicker(device=self.device, **settings)
        graph = packed = None
        try:
            graph, packed = _capture(lambda: picker.pick(self.logits), self.device,
                                     generator=picker.generator)
        except Exception as exc:  # the pick runs eagerly after the replayed forward: still one launch less per op
            log.warning("the token pick could not be captured as a CUDA graph (%s: %s); it runs eagerly after the "
                        "captured forward", type(exc).__name__, exc)
        pick = CapturedPick(picker, graph, packed)
        self.picks[key] = pick
        while len(self.picks) > MAX_PICKS:
            self.picks.popitem(last=False)
        return pick, time.perf_counter() - start


def _capture(fn, device: torch.device, generator=None):
    """Capture `fn()` as a CUDA graph after WARMUP_STEPS eager runs on a side stream (what torch's
    own recipe asks: lazy initialisation must not happen inside the capture). A generator the
    region draws from is registered with the graph first, so each replay moves it on as an eager
    call would. Returns (graph, fn's output, whose memory every replay rewrites)."""
    if generator is not None:
        if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
            raise GraphsUnavailable(f"torch {torch.__version__} cannot capture a draw from a generator of its own "
                                    f"(no CUDAGraph.register_generator_state)")
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(WARMUP_STEPS):
            fn()
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    if generator is not None:
        graph.register_generator_state(generator)
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads may use the GPU meanwhile
        out = fn()
    torch.cuda.synchronize(device)
    return graph, out


def acquire(model) -> tuple[CapturedStep, float]:
    """The captured step for `model` now (kept, or captured here: call it with the model in eval
    mode under inference_mode) and the seconds a capture took; marks it busy until `release`.
    Raises GraphsUnavailable with the reason where it cannot be had. A kept step is handed out
    with hooks attached (the decoder's steps take the plain path while they are); a capture never
    happens with one attached."""
    if model.device.type != "cuda":
        raise GraphsUnavailable(f"CUDA graphs need a CUDA device; the model is on {model.device}")
    key = shape_key(model)
    with _lock:
        step = _steps.get(model)
        if step is not None and step.key == key:
            if step.busy:
                raise GraphsUnavailable("another generation is using this model's captured step")
            step.busy = True
            return step, 0.0
        failed = _failed.get(model)
        if failed is not None and failed[0] == key:
            raise GraphsUnavailable(failed[1])
        if HookWatch(model).attached():  # its Python would run in the warm-up and its ops be captured
            raise GraphsUnavailable("a forward hook is attached (an ablation, a feature edit, a listener), and a graph "
                                    "captured now would replay it after it is removed")
        _steps.pop(model, None)  # never two captured steps (and KV caches) for one model
        start = time.perf_counter()
        try:
            step = CapturedStep(model, key)
        except Exception as exc:
            reason = f"capturing the decode step failed ({type(exc).__name__}: {exc})"
            _failed[model] = (key, reason)
            log.warning("%s; this model decodes without CUDA graphs", reason)
            raise GraphsUnavailable(reason) from exc
        seconds = time.perf_counter() - start
        log.info("decode step captured as a CUDA graph in %.3f s (%s, block %d); kept for the next generation",
                 seconds, model.dtype, model.config.block_size)
        step.busy = True
        _steps[model] = step
        return step, seconds


def release(step: CapturedStep) -> None:
    with _lock:
        step.busy = False


def forget(model) -> None:
    """Drop `model`'s captured step and any remembered failure (its memory goes with it)."""
    with _lock:
        _steps.pop(model, None)
        _failed.pop(model, None)


def captured(model) -> bool:
    """Whether a captured step is kept for `model` (for any shape)."""
    with _lock:
        return model in _steps
