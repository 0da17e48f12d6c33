"""The run folder: everything a training leaves behind, laid out so that a watcher can follow it.

A run folder is the one interface between a training and whoever watches it (the app's Train
panel, a terminal, a cluster job on a shared disk). Only rank 0 writes it. Layout:

    DIR/run.json        what was run, written at the start (atomically) and updated on resume:
                        {"format": "gptcore-run", "version": 1, "run": id, "command": argv,
                         "started": ISO time, "schemes": [init schemes], "model_config": GPTConfig
                         dict, "train_config": TrainConfig dict, "corpus": {...}, "tokenizer":
                         {"kind": "char"|"gpt2"|"ids", "vocab": "char_vocab.json" or null}, "world_size": n,
                         "device": str, "dtype": the autocast dtype training used ("auto" decided),
                         "autocast": how "auto" was decided on a CPU (autocast_choice.AutocastChoice:
                         {"dtype", "bf16_ms", "fp32_ms", "source", "machine"}) or null,
                         "probe_interval": n, "max_time": seconds or null,
                         "checkpoints": {scheme: file name of its latest ckpt}, "resumes": [
                         {"time", "step", "command"}]}
    DIR/trace.jsonl     the append-only record of the run (trace.py has the format)
    DIR/char_vocab.json a char tokenizer's symbols (data.py's Corpus.save_vocab: "chars"[i] is id i)
    DIR/ckpt.pt         the latest full checkpoint (nanoGPT's ckpt.pt: weights, optimizer, iter_num,
                        ...), saved at each eval and at the end; with several init schemes one per
                        scheme, DIR/ckpt-<scheme>.pt (run.json's "checkpoints" maps them)
    DIR/steps/<scheme>/step_000500.safetensors
                        the weights alone at that step (our parameter names; a tied head stored
                        once; metadata "format": "gptcore-step-1", "config": the GPTConfig as JSON,
                        "step", "scheme"), kept for scrubbing; `gptcore.load` opens them too
    DIR/data/<name>_char/  a text run's data as nanoGPT's prepare.py writes it (train.bin, val.bin,
                        meta.pkl; data.write_prepared), which every ckpt.pt's config['dataset'] names
                        so that nanoGPT's sample.py finds meta.pkl
    DIR/probes/<scheme>/attention_000500.npy
                        the probe prompt's attention at that step, float16 (n_layer, n_head, T, T)

Every file is written to a temporary name and renamed, so a reader (or a crash) never sees half a
file, and a kill during a save leaves the previous one in place.
"""
from __future__ import annotations

import datetime
import json
import re
import secrets
from pathlib import Path

from gptcore.io.atomic import atomic_path, atomic_write_bytes

RUN_FORMAT = "gptcore-run"
RUN_VERSION = 1
RUN_FILE = "run.json"
TRACE_FILE = "trace.jsonl"
_STEP_FILE = re.compile(r"step_(\d+)\.safetensors$")


class RunFolderError(ValueError):
    """A run folder that cannot be used as asked; the message says why and what to do."""


def write_json(path: Path, value) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=1, allow_nan=False) + "\n").encode("utf-8"))


def ckpt_name(scheme: str, schemes) -> str:
    """nanoGPT's name when one scheme trains (so nanoGPT's `init_from=resume` finds it), else one per scheme."""
    return "ckpt.pt" if len(schemes) == 1 else f"ckpt-{scheme}.pt"


class RunFolder:
    """Paths and the small files of one run folder (the module docstring is the layout)."""

    def __init__(self, root):
        self.root = Path(root)

    # -- paths --------------------------------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.root / RUN_FILE

    @property
    def trace(self) -> Path:
        return self.root / TRACE_FILE

    def ckpt(self, scheme: str, schemes) -> Path:
        return self.root / ckpt_name(scheme, schemes)

    def step_weights(self, scheme: str, step: int) -> Path:
        return self.root / "steps" / scheme / f"step_{step:06d}.safetensors"

    def attention_file(self, scheme: str, step: int) -> Path:
        return self.root / "probes" / scheme / f"attention_{step:06d}.npy"

    def relative(self, path: Path) -> str:
        return Path(path).relative_to(self.root).as_posix()

    # -- run.json -----------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.run_json.is_file()

    def start(self, meta: dict, resume: bool, step: int = 0) -> dict:
        """Create the folder for a new run (refusing to mix two runs in one folder) or record a resume."""
        if resume:
            old = self.read_meta()
            old.setdefault("resumes", []).append(
                {"time": _now(), "step": step, "command": meta.get("command")})
            for key in ("train_config", "max_time", "probe_interval", "world_size", "device", "dtype"):
                if key in meta:
                    old[key] = meta[key]  # a resume may extend max_iters, change the interval, ...
            write_json(self.run_json, old)
            return old
        if self.exists() or self.trace.exists():
            raise RunFolderError(f"{self.root} already holds a run; continue it with --init_from=resume, "
                                 f"or choose another --out_dir (or delete that folder)")
        self.root.mkdir(parents=True, exist_ok=True)
        meta = {"format": RUN_FORMAT, "version": RUN_VERSION, "run": secrets.token_hex(6), "started": _now(),
                **meta, "resumes": []}
        write_json(self.run_json, meta)
        return meta

    def read_meta(self) -> dict:
        if not self.run_json.is_file():
            raise RunFolderError(f"{self.root} is not a run folder (no {RUN_FILE}); give the --out_dir of a run "
                                 f"started by `python -m gptcore.train`")
        try:
            meta = json.loads(self.run_json.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RunFolderError(f"{self.run_json} is damaged ({exc}); the run cannot be read") from None
        if not isinstance(meta, dict) or meta.get("format") != RUN_FORMAT:
            raise RunFolderError(f"{self.run_json} is not a gptcore run description (format is not {RUN_FORMAT!r})")
        if meta.get("version", 0) > RUN_VERSION:
            raise RunFolderError(f"{self.run_json} has format version {meta['version']}, newer than this gptcore "
                                 f"reads ({RUN_VERSION}); update gptcore")
        shapes = {"schemes": list, "train_config": dict, "model_config": dict, "corpus": dict, "tokenizer": dict}
        wrong = [key for key, kind in shapes.items() if not isinstance(meta.get(key), kind)]
        if wrong:
            raise RunFolderError(f"{self.run_json} lacks {', '.join(wrong)} (or they are damaged); the run cannot be "
                                 f"read or resumed")
        return meta

    # -- weights kept per step ------------------------------------------------------------------
    def save_step_weights(self, model, scheme: str, step: int) -> Path:
        """The weights alone (no optimizer), a tied head stored once; ~3 MB at the CPU recipe."""
        from safetensors.torch import save_file

        from gptcore.io.layouts import GPTCORE_STEP

        path = self.step_weights(scheme, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            save_file(unique_tensors(model), str(tmp), metadata={
                "format": GPTCORE_STEP, "config": json.dumps(model.config.to_dict()), "step": str(step), "scheme": scheme})
        return path

    def steps(self, scheme: str) -> list[tuple[int, Path]]:
        """(step, path) of every kept weight file of `scheme`, in step order (the scrubber's stops)."""
        folder = self.root / "steps" / scheme
        found = [(int(m.group(1)), p) for p in folder.glob("step_*.safetensors") if (m := _STEP_FILE.search(p.name))]
        return sorted(found)

    def load_step(self, scheme: str, step: int, device="cpu"):
        """A GPT with the weights of `scheme` at `step` (gptcore.load reads the config they carry)."""
        from gptcore.io.loading import load

        path = self.step_weights(scheme, step)
        if not path.is_file():
            kept = ", ".join(str(s) for s, _ in self.steps(scheme)) or "none"
            raise RunFolderError(f"{path.name}: no weights kept for {scheme} at step {step} (kept steps: {kept})")
        model, _ = load(path, device=device)
        return model.eval()

    # -- probe side files ------------------------------------------------------------------------
    def save_attention(self, pattern, scheme: str, step: int) -> Path:
        """pattern: numpy (L, nh, T, T) -> float16 .npy (read back with numpy.load, no pickle)."""
        import io

        import numpy as np

        path = self.attention_file(scheme, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, np.asarray(pattern, dtype=np.float16), allow_pickle=False)
        atomic_write_bytes(path, buf.getvalue())
        return path


def unique_tensors(model) -> dict:
    """The state dict with each storage once (a tied head shares the embedding's): safetensors
    refuses shared tensors, and the loader ties them again."""
    seen, out = set(), {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.shape)
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous()
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
