"""nanoGPT train.py's command line, read here: its config files and the settings that are its own.

Why: whatever `python train.py ...` accepts, `python -m gptcore.train ...` accepts and does the
same (issue 34), so a nanoGPT user's command, e.g. `config/train_shakespeare_char.py
--device=cpu --compile=False`, runs unchanged.

- A config file (train.py's configurator `exec`s it): here it is parsed, never run. Its statements
  must be `name = <literal>` (numbers, strings, True/False, None, lists/tuples of them) — all that
  nanoGPT's own config/*.py files hold except finetune's `'ft-' + str(time.time())` run name; any
  other statement is refused with its line and what to write instead. Its settings apply where
  the file stands among the arguments, as train.py's configurator applies them in order.
- train.py's settings that are not TrainConfig's or GPTConfig's (NANOGPT_RUN_SETTINGS): dataset
  (data/<dataset> from the current folder, as train.py reads it), eval_only (evaluate at step 0,
  then stop), always_save_checkpoint (False: ckpt.pt is written only when the val loss improved),
  and settings with nothing to do here, accepted with a note (wandb_*: the run's trace is its log;
  backend: gloo on CPU, nccl on CUDA). `compile` is not among them: it is TrainConfig's, honoured
  (torch.compile of the model and its loss, on CUDA by default as in train.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

# name -> (kind, default), as train.py's RUN_SETTINGS spells them; train.py's own defaults
NANOGPT_RUN_SETTINGS = {
    "dataset": ("str | None", None), "eval_only": ("bool", False), "always_save_checkpoint": ("bool", True),
    "wandb_log": ("bool", False), "wandb_project": ("str", "owt"), "wandb_run_name": ("str", "gpt2"),
    "backend": ("str | None", None),
}


class ConfigFileError(ValueError):
    """A config file that cannot be read as settings; the message names the line and the fix."""


def config_file_args(path: str) -> list[str]:
    """The `--key=value` arguments a nanoGPT config file sets, in its order (see the module docstring)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigFileError(f"{path}: no such config file; give a nanoGPT config file (e.g. "
                              f"config/train_shakespeare_char.py) or settings as --key=value")
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigFileError(f"{path} is not a Python config file ({exc}); write its settings as --key=value") from None
    args = []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring or a bare string
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise ConfigFileError(_refusal(path, node, "is not a `name = value` setting"))
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            raise ConfigFileError(_refusal(path, node, f"computes {node.targets[0].id}'s value")) from None
        args.append(f"--{node.targets[0].id}={value}")
    return args


def _refusal(path: str, node: ast.AST, what: str) -> str:
    return (f"{path}, line {node.lineno}: {what}; config files are read, not run, so each line must be "
            f"`name = <literal value>` — replace it with its value (e.g. wandb_run_name = 'ft'), or drop it "
            f"and give the setting as --key=value")


def notes(run: dict, given: set) -> list[str]:
    """Sentences for what is accepted but done differently or not at all (printed by the run)."""
    said = []
    if run.get("wandb_log"):
        said.append("wandb_log=True: nothing is sent to Weights & Biases; the run's trace.jsonl is its log "
                    "(`python -m gptcore.training.trace DIR` prints it)")
    return said
