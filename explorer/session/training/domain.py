"""The training domain (`session.training`): run folders read, their steps put into the session, saved.

Why here (no Qt; called from workers): the Train panel's controller only wires its view to these
calls. Reading a run folder is explorer/session/training/runs.py (gptcore's trace reader and
interpreter underneath); a kept step's weights are read by gptcore's one step reader,
`RunFolder.load_step`. Showing a step the first time builds a model of the run's shape (a model
swap, with the run's character tokenizer, so Attention and Generation show characters, not ids);
later steps of the same run copy weights into that model in place (`show_training_step`: same
shapes, so views recompute without clearing). The model's facts — name, trained or not, why —
change with the weights, so the status bar, its badge and the UNTRAINED banner always describe the
step every panel shows.
"""
from __future__ import annotations

import dataclasses
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from explorer.session.results import RunStep
from explorer.session.training.runs import RunFollower

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


def follower_step_name(follower, scheme: str, step: int) -> str:
    """step_name with the run's own facts (its length, the step's val loss, its corpus and schemes)."""
    return step_name(step, follower.max_iters, follower.latest_val(scheme, step), follower.corpus_label(), scheme,
                     len(follower.schemes))


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


def run_step(follower: RunFollower, scheme: str, step: int) -> RunStep:
    """The typed fact "these weights are step `step` of `scheme` in this run"."""
    return RunStep(root=str(follower.root), scheme=scheme, step=int(step), max_iters=int(follower.max_iters or 0),
                   schemes=max(1, len(follower.schemes)))


def is_run_model(info, root) -> bool:
    """Does the session's model come from this run folder (any scheme, any step)? Read from the
    typed fact (`ModelInfo.run`), never from the text."""
    return info.run is not None and Path(info.run.root) == Path(root)


class TrainingDomain:
    """Run folders and their models for one session core (`session.training`)."""

    def __init__(self, core):
        self.core = core
        self._followers: dict[Path, RunFollower] = {}  # one per run folder: its trace is read once
        self._lock = threading.Lock()

    def open(self, path) -> RunFollower:
        """The run folder `path` with everything written so far read (a finished run's trace can be
        megabytes: call this in a worker); RunFollowError saying why it cannot be read. The follower
        is kept: whoever asks for the same run later (Routes over training) shares what it read."""
        follower = RunFollower(path)
        follower.poll()
        return self._keep(follower)

    def follow(self, path) -> RunFollower:
        """A follower of a run that is only starting (nothing read yet), kept like open()'s."""
        return self._keep(RunFollower(path))

    @staticmethod
    def poll(follower: RunFollower) -> bool:
        """Read what the run wrote since the last poll (a task: file reads stay off the GUI thread)."""
        return follower.poll()

    def follower_for(self, root) -> RunFollower:
        """The kept follower of run folder `root`, brought up to date, or a new one (read once)."""
        with self._lock:
            follower = self._followers.get(Path(root).expanduser())
        if follower is None:
            return self.open(root)
        follower.poll()
        return follower

    def _keep(self, follower: RunFollower) -> RunFollower:
        with self._lock:
            self._followers[follower.root] = follower
        return follower

    def show_step(self, follower: RunFollower, scheme: str, step: int, name: str | None = None,
                  cancel=None) -> StepShown:
        """Make the run's kept `step` of `scheme` the session's model (a copy: training goes on): copied
        into the model in place when the session already shows this run's model of the same config,
        otherwise a model swap; `name` is what the status bar calls it (step_name's words by default).
        RunFolderError when the step's file is gone or damaged."""
        from gptcore.errors import Cancelled
        from gptcore.io.checkpoints import LoadError
        from gptcore.training.run import RunFolderError

        core, root = self.core, follower.root
        name = name or follower_step_name(follower, scheme, step)
        try:
            model = follower.folder.load_step(scheme, step, device=core.device)
        except RunFolderError:
            raise
        except (LoadError, OSError, ValueError) as exc:
            raise RunFolderError(f"the weights of step {step:,} cannot be read ({exc}); the file is damaged or "
                                 f"still being written — choose another step") from None
        if cancel is not None and cancel():
            raise Cancelled("another step was chosen")
        provenance = f"weights of step {step:,} of the training run in {root}"
        run = run_step(follower, scheme, step)
        with core.lock:
            shown = core.info.run if core.has_model else None
            same_run = (shown is not None and (Path(shown.root), shown.scheme) == (root, scheme)
                        and core.config is not None and core.config.to_dict() == model.config.to_dict())
        if same_run:  # weights, facts and version move together under the core's lock; then every view is told
            def facts(info):
                return dataclasses.replace(info, trained=bool(step), note="", run=run,
                                           status="trained" if step else "untrained", provenance=provenance)

            version = core.show_training_step(model.state_dict(), step, name=name, info=facts)
            return StepShown(str(root), scheme, step, name, version, swapped=False)
        return self._adopt_step(follower, scheme, step, model, provenance=provenance, name=name)

    def _adopt_step(self, follower: RunFollower, scheme: str, step: int, model, *, provenance: str,
                    name: str | None = None) -> StepShown:
        """`model`, the run's `step`, becomes the session's model (a swap) with the run's tokenizer and facts."""
        root = follower.root
        name = name or follower_step_name(follower, scheme, step)
        tokenizer, tokenizer_name = run_tokenizer(root, follower.meta or follower.folder.read_meta())
        self.core.adopt(model.to(self.core.device).eval(), name=name, source=f"{RUN_SOURCE_PREFIX}{root} ({scheme})",
                        tokenizer=tokenizer, tokenizer_name=tokenizer_name, trained=bool(step),
                        provenance=provenance, run=run_step(follower, scheme, step))
        return StepShown(str(root), scheme, step, name, self.core.version, swapped=True)

    def show_latest(self, path, cancel=None) -> StepShown | None:
        """`--run DIR`: the run's latest kept step (of its first scheme that kept one) becomes the
        session's model; None when the run has kept no step yet (RunFollowError: not a run folder)."""
        follower = self.open(path)
        with follower.lock:
            kept = [(scheme, follower.kept_steps(scheme)) for scheme in follower.schemes]
        scheme, steps = next(((s, k) for s, k in kept if k), (None, []))
        return self.show_step(follower, scheme, steps[-1], cancel=cancel) if steps else None

    def use_final(self, follower: RunFollower, scheme: str, cancel=None) -> StepShown:
        """The run's latest full checkpoint (ckpt.pt) becomes the session's model, as the run's step it
        was saved at (its iter_num): the same facts (`ModelInfo.run`), tokenizer and name as the step
        slider gives, so every panel still knows the run — its SAEs, its data. A kept step is read from
        its own file (the same weights); a step that was not kept (a run stopped between evals) from
        ckpt.pt."""
        from gptcore.errors import Cancelled
        from gptcore.io.checkpoints import read_torch

        path = self._ckpt(follower, scheme)
        step = int(read_torch(path).get("iter_num") or 0)
        with follower.lock:
            kept = follower.kept_steps(scheme)
        if step in kept:
            return self.show_step(follower, scheme, step, cancel=cancel)
        from explorer.session import models

        model, _info, _tokenizer = models.read(str(path), self.core.device, cancel=cancel)
        if cancel is not None and cancel():
            raise Cancelled("another model was asked for")
        return self._adopt_step(follower, scheme, step, model, provenance=f"{path.name} of the training run in "
                                f"{follower.root}, saved at step {step:,}")

    def save_ckpt(self, follower: RunFollower, scheme: str, target) -> str:
        """A copy of the run's latest ckpt.pt at `target`; what was saved, in words."""
        shutil.copy2(self._ckpt(follower, scheme), target)
        return f"{target} (nanoGPT's ckpt.pt: model, optimizer, model_args, iter_num)"

    def save_hf(self, follower: RunFollower, scheme: str, target) -> str:
        """The run's latest ckpt.pt as a Hugging Face GPT-2 folder at `target` (new or empty); the run's
        char_vocab.json goes with it so this app reads the text. ValueError when `target` is taken."""
        from gptcore.io.export_hf import save_hf_folder
        from gptcore.io.loading import load

        src, target = self._ckpt(follower, scheme), Path(target)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise ValueError(f"{target} already exists and is not an empty folder; choose a new folder name")
        vocab = [p for p in (follower.root / "char_vocab.json",) if p.is_file()]
        model, _info = load(str(src), device="cpu")
        folder = save_hf_folder(model, target, extra_files=vocab)
        return f"{folder} (config.json + model.safetensors: transformers' GPT2LMHeadModel opens it)"

    @staticmethod
    def _ckpt(follower: RunFollower, scheme: str) -> Path:
        path = follower.ckpt_path(scheme)
        if path is None:
            raise FileNotFoundError(f"{follower.root} has no ckpt.pt yet (one is written at each eval); wait for "
                                    f"the first eval")
        return path

    def is_run_model(self, root) -> bool:
        """Does the session's model come from the run folder `root`?"""
        return is_run_model(self.core.info, root)
