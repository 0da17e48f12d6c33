"""A training run's weights as the session's model: a kept step (the scrubber) or the final ckpt.pt.

Why here (no Qt; runs in a worker): loading a step reads a few MB and, the first time, builds a
model of the run's shape; later steps of the same run only copy weights into that model
(`Session.show_training_step`: same shapes, so views recompute without clearing, and every panel
follows the TrainingStepShown event). The run's character vocabulary becomes the session's
tokenizer, so Attention and Generation show characters, not ids.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

RUN_SOURCE_PREFIX = "training run "  # ModelInfo.source of a model the Train panel put in the session


@dataclass(frozen=True)
class StepShown:
    run: str
    scheme: str
    step: int
    name: str  # what the status bar says
    version: int  # the session version after the change
    swapped: bool  # True: a new model (first step of this run); False: weights copied in place


def step_name(step: int, max_iters: int, val: float | None, corpus: str, scheme: str, schemes: int) -> str:
    """"trained · step 1,200 of 2,000 · val 1.63 · pydoc topics, char" (+ the scheme when several)."""
    parts = ["trained" if step else "initialised", f"step {step:,} of {max_iters:,}" if max_iters else f"step {step:,}"]
    if val is not None and val == val:
        parts.append(f"val {val:.2f}")
    parts.append(corpus)
    if schemes > 1:
        parts.append(f"{scheme} init")
    return " · ".join(parts)


def run_tokenizer(root: Path, meta: dict):
    """(tokenizer or None for GPT-2's, its description) for the run's models."""
    from gptcore.io.char_tokenizer import CHAR_VOCAB_FILE, CharTokenizer
    from gptcore.io.folder_tokenizer import IdTokenizer

    kind = (meta.get("tokenizer") or {}).get("kind", "char")
    if kind == "gpt2":
        return None, "GPT-2 (offline BPE) — the run trained with it"
    vocab = root / CHAR_VOCAB_FILE
    if vocab.is_file():
        tok = CharTokenizer.from_file(vocab)
        return tok, f"characters — the run's {CHAR_VOCAB_FILE} ({tok.n_vocab} symbols)"
    n_vocab = int((meta.get("model_config") or {}).get("vocab_size") or 0)
    reason = "the run saved no vocabulary (a nanoGPT data folder's meta.pkl is never unpickled)"
    return IdTokenizer(n_vocab, reason), f"none — {reason}: token ids are shown"


def show_step(session, root, scheme: str, step: int, weights: Path, name: str, cancel=None) -> StepShown:
    """Make `weights` (the run's step file) the session's model: copied into the model in place when
    the session already shows this run's model of the same config, otherwise a model swap."""
    from safetensors import safe_open

    from gptcore.model.config import GPTConfig
    from gptcore.training.run import RunFolder, RunFolderError

    root = Path(root)
    source = f"{RUN_SOURCE_PREFIX}{root} ({scheme})"
    if not weights.is_file():
        raise RunFolderError(f"{weights}: the weights of step {step:,} are gone (the run folder changed); "
                             f"choose another step or open the run again")
    try:
        with safe_open(str(weights), framework="pt", device="cpu") as f:
            config = GPTConfig.from_dict(json.loads(f.metadata()["config"]))
            state = {key: f.get_tensor(key) for key in f.keys()}
    except (OSError, ValueError, KeyError) as exc:
        raise RunFolderError(f"{weights} cannot be read ({exc}); the file is damaged or still being written — "
                             f"choose another step") from None
    if cancel is not None and cancel():
        from gptcore.errors import Cancelled

        raise Cancelled("another step was chosen")
    current = session.info
    same_run = (session.has_model and current.source == source and session.config is not None
                and session.config.to_dict() == config.to_dict())
    if same_run:
        if config.tie_weights and "unembed.weight" not in state:
            state["unembed.weight"] = state["embed.weight"]
        state = {k: v.to(session.model.device) for k, v in state.items()}
        version = session.show_training_step(state, step, name=name)
        return StepShown(str(root), scheme, step, name, version, swapped=False)
    model = _build(config, state, session.device, weights)
    meta = RunFolder(root).read_meta()
    tokenizer, tokenizer_name = run_tokenizer(root, meta)
    session.adopt(model, name=name, source=source, tokenizer=tokenizer, tokenizer_name=tokenizer_name,
                  trained=bool(step), provenance=f"weights of step {step:,} of the training run in {root}")
    return StepShown(str(root), scheme, step, name, session.version, swapped=True)


def _build(config, state: dict, device, weights: Path):
    """A GPT of the config the step file carries, with its weights. Built from that config, never
    from the tensors' shapes: a shape cannot tell 4 heads of 32 from 2 of 64."""
    from gptcore.model.gpt import GPT
    from gptcore.training.run import RunFolderError

    model = GPT.empty(config, device=device)
    missing, unexpected = model.load_state_dict({k: v.to(device) for k, v in state.items()}, strict=False)
    shared = {"unembed.weight"} if config.tie_weights else set()
    if set(missing) - shared or unexpected:
        raise RunFolderError(f"{weights}: the weights do not match the config stored with them (missing "
                             f"{sorted(set(missing) - shared)[:3]}, unexpected {unexpected[:3]}); the file is damaged")
    model.tie_weights()
    return model.eval()


def is_run_model(info, root) -> bool:
    """Does the session's model come from this run folder (any scheme, any step)?"""
    return str(info.source).startswith(f"{RUN_SOURCE_PREFIX}{Path(root)} (")
