"""Whether bf16 generation is faster than fp32 here, and what its copy of the weights costs: measured
once per machine, torch version and model shape, and remembered in a small JSON file in the user's
cache folder. No Qt here.

Why: CPU flags said "no avx512_bf16 nor AMX, so bf16 would be slower" on a machine where GPT-2
small decoded at 62 tok/s in bf16 against 33 in fp32 (issue 34). What is measured is a short stream
of tokens through generation's own loop (gptcore/generation/decode_timing.py: the model and the
sampler, not the window's drawing), since one decode step alone promised more than streaming gave
(issue 39: 35 against 28 tok/s for one step, ~10 % faster for 50 streamed tokens). It takes a few seconds
for GPT-2 small on a CPU (4.6-5.0 s on one thread of a loaded 2-core AMD EPYC), runs on the compute thread
at the first use for a shape, and is then read
from the cache: keyed by the CPU's model name (the GPU's on CUDA), torch's version (its kernels change
between releases) and the shape, so another machine, torch or model measures again. Entries of an
older measurement (one decode step) are measured again. A cache that cannot be read or written costs
only a new measurement.
"""
from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path

from gptcore.io.atomic import atomic_write_bytes

log = logging.getLogger("explorer")

CACHE_FILE = "bf16_decode_speed.json"
MAX_ENTRIES = 64  # a few shapes on a few torch versions; the oldest go first
MEASURES = "stream"  # what an entry's figures are (entries without it timed one decode step: measured again)
MIB = 1 << 20


@dataclass(frozen=True)
class DecodeSpeed:
    """Milliseconds per streamed token of one model shape, in both dtypes, on `machine` (torch
    `torch_version`): `tokens` tokens drawn by generation's loop after the first; and the bytes the
    bf16 copy holds beside the fp32 weights (its weights, plus oneDNN's packed copies where made)."""
    fp32_ms: float
    bf16_ms: float
    machine: str
    torch_version: str
    tokens: int = 12
    copy_bytes: int = 0  # 0: not known
    packed_bytes: int = 0  # of copy_bytes, the packed copies of the bf16 weights

    @property
    def bf16_faster(self) -> bool:
        return self.bf16_ms < self.fp32_ms

    @staticmethod
    def tok_s(ms: float) -> float:
        return 1000.0 / ms if ms > 0 else math.inf

    def figures(self) -> str:
        """'bf16 61.8 tok/s (16.2 ms/token), fp32 33.1 tok/s (30.2 ms/token)'."""
        return (f"bf16 {self.tok_s(self.bf16_ms):.1f} tok/s ({self.bf16_ms:.1f} ms/token), "
                f"fp32 {self.tok_s(self.fp32_ms):.1f} tok/s ({self.fp32_ms:.1f} ms/token)")

    def what(self) -> str:
        """What the figures measure, in a sentence."""
        return (f"Streaming {self.tokens} tokens through generation's loop (the model's forward with its KV cache "
                f"and the sampler, best of 2; the window's drawing of each token comes on top, the same in both)")

    def memory(self) -> str:
        """'the bf16 copy holds 475 MiB beside the fp32 weights (237 MiB of weights + 238 MiB packed for
        oneDNN)'; '' when not known."""
        if not self.copy_bytes:
            return ""
        parts = f" ({(self.copy_bytes - self.packed_bytes) / MIB:,.0f} MiB of weights + " \
                f"{self.packed_bytes / MIB:,.0f} MiB packed for oneDNN)" if self.packed_bytes else ""
        return f"the bf16 copy holds {self.copy_bytes / MIB:,.0f} MiB beside the fp32 weights{parts}"

    def where(self) -> str:
        return f"measured on {self.machine} with torch {self.torch_version}, for this model's shape"

    def to_json(self) -> dict:
        return dict(fp32_ms=self.fp32_ms, bf16_ms=self.bf16_ms, machine=self.machine, torch=self.torch_version,
                    measures=MEASURES, tokens=self.tokens, copy_bytes=self.copy_bytes, packed_bytes=self.packed_bytes)


def machine_name(device) -> str:
    """What the kernels run on: the GPU's name on CUDA, else the CPU's model name."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from gptcore.model.cpu import cpu_name

    return cpu_name() if device.type == "cpu" else f"{device.type} ({cpu_name()})"


def speed_key(config, device) -> str:
    """The cache key: machine | torch version | the shape fields that change a decode step's time."""
    import torch

    shape = (f"L{config.n_layer} H{config.n_head}/{config.kv_heads} C{config.n_embd} F{config.d_mlp} "
             f"V{config.vocab_size} {config.mlp} {config.norm} {config.pos_embedding} "
             f"bias={config.bias} tied={config.tie_weights}")
    return f"{machine_name(device)} | torch {torch.__version__} | {shape}"


def default_cache_path() -> Path:
    from gptcore.io.user_dirs import user_dir

    return user_dir("cache", "gpt-explorer") / CACHE_FILE


class SpeedCache:
    """key -> DecodeSpeed, in memory and in a JSON file (read at first use, rewritten on `put`)."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self._entries: dict[str, DecodeSpeed] | None = None
        self._lock = threading.Lock()

    def _file(self) -> Path:
        if self.path is None:
            self.path = default_cache_path()
        return self.path

    def _load(self) -> dict[str, DecodeSpeed]:
        if self._entries is None:
            entries = {}
            try:
                raw = json.loads(self._file().read_text(encoding="utf-8"))
                for key, e in raw.items():
                    if e.get("measures") != MEASURES:
                        continue  # one decode step (before issue 39): measured again, as streaming
                    entries[key] = DecodeSpeed(float(e["fp32_ms"]), float(e["bf16_ms"]), str(e["machine"]),
                                               str(e["torch"]), int(e["tokens"]), int(e["copy_bytes"]),
                                               int(e["packed_bytes"]))
            except FileNotFoundError:
                pass
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                log.warning("bf16 speed cache %s not read (%s); speeds are measured again", self.path, exc)
            self._entries = entries
        return self._entries

    def get(self, key: str) -> DecodeSpeed | None:
        with self._lock:
            return self._load().get(key)

    def put(self, key: str, speed: DecodeSpeed) -> None:
        with self._lock:
            entries = self._load()
            entries.pop(key, None)
            entries[key] = speed  # newest last
            while len(entries) > MAX_ENTRIES:
                entries.pop(next(iter(entries)))
            path = self._file()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                text = json.dumps({k: v.to_json() for k, v in entries.items()}, indent=1)
                atomic_write_bytes(path, text.encode("utf-8"))
            except OSError as exc:
                log.warning("bf16 speed cache %s not written (%s)", path, exc)


def copy_bytes(bf16_model) -> tuple[int, int]:
    """(all, packed): the bytes the bf16 copy holds — its parameters and buffers (a tied head counted
    once) and oneDNN's packed copies of its layers made so far (after a stream: every one-row layer)."""
    from gptcore.model.packed_bf16 import packed_bytes

    seen, total = set(), 0
    for t in list(bf16_model.parameters()) + list(bf16_model.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    packed = packed_bytes(bf16_model)
    return total + packed, packed


def measure(model, bf16_model) -> DecodeSpeed:
    """Time streamed tokens of `model` (fp32) and its bf16 copy (gptcore's decode_timing), and count
    what the copy holds."""
    import torch

    from gptcore.generation.decode_timing import STREAM_TOKENS, stream_seconds_per_token

    fp32_s, bf16_s = stream_seconds_per_token(model, bf16_model)
    total, packed = copy_bytes(bf16_model)
    speed = DecodeSpeed(1e3 * fp32_s, 1e3 * bf16_s, machine_name(model.device), torch.__version__, STREAM_TOKENS,
                        total, packed)
    log.info("streamed tokens: %s; %s", speed.figures(), speed.memory())
    return speed
