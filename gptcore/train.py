"""`python -m gptcore.train`: train a GPT the way nanoGPT's train.py does, into a run folder.

    python -m gptcore.train [--data=PATH] [--out_dir=DIR] [--key=value ...]
    torchrun --nproc_per_node=N -m gptcore.train [...]       (DDP: gloo on CPU, nccl on CUDA)

Settings use nanoGPT's override style, `--key=value` (or `--key value`), and nanoGPT's config files
(`python -m gptcore.train config/train_shakespeare_char.py --device=cpu`: read, never run; nanogpt_cli.py):
- any TrainConfig field (batch_size, gradient_accumulation_steps — global, shared by the processes —,
  max_iters, learning_rate, min_lr, warmup_iters, lr_decay_iters, decay_lr, weight_decay, beta1,
  beta2, grad_clip, eval_interval, eval_iters, seed, dtype, device, compile — torch.compile of the
  model, on CUDA unless --compile=False, on a CPU only with --compile=True);
- any GPTConfig field (n_layer, n_head, n_embd, block_size, bias, dropout, and the modern parts);
- data: a UTF-8 text file or a nanoGPT prepared folder (default: CPython's pydoc topics);
  tokenizer: char or gpt2 (text files); out_dir (default "out"); init: an init scheme or a comma
  list (`--init=gpt2,pytorch-default`: each scheme trains on the same batches, into one folder);
  probe_interval (steps between probes, 0 = none); max_time (seconds, then stop as if done);
  log_interval (steps between progress lines); keep_every (keep the weights of every Nth eval);
  init_from: scratch or resume (`--resume` is short for it): continue the run in out_dir, or nanoGPT's
  own out_dir (its ckpt.pt: iter_num, optimizer, recorded settings, data/<dataset> found as train.py would);
  train.py's own: dataset (data/<dataset> from the current folder), eval_only, always_save_checkpoint
  (False: ckpt.pt only when val improved), and wandb_*, backend (accepted; a note says why unused);
  preset: a named starting point with its own data (`--preset=induction`: an induction head forms in
  about a minute on one CPU thread, gptcore/training/presets.py); other settings override it.
Defaults are nanoGPT's CPU recipe (TrainConfig.cpu_recipe, CPU_RECIPE_MODEL) with dtype=auto
(on a CPU: bfloat16 autocast where a few timed steps of the model find it faster, the figures
printed and kept in run.json and the trace; on CUDA train.py's choice). SIGINT (Ctrl-C) and
SIGTERM save a checkpoint and stop cleanly (exit 130 and 0). Bad settings, data or a config that
will not fit in memory are refused before anything starts, with a message and exit status 2.
"""
from __future__ import annotations

import os

# OpenMP's threads spin while they wait for work; beside another busy process (the app's GUI, a
# second run) that made 2 threads 3-6x slower than 1 on 2 cores. Passive waiting must be set
# before torch (and its OpenMP runtime) is loaded to take effect.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dataclasses  # noqa: E402
import difflib  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from gptcore.model.config import GPTConfig  # noqa: E402
from gptcore.training.config import CPU_RECIPE_MODEL, TrainConfig  # noqa: E402
from gptcore.training.nanogpt_cli import NANOGPT_RUN_SETTINGS, config_file_args  # noqa: E402
from gptcore.training.setup import Settings, UsageError  # noqa: E402

DEFAULT_PROBE_INTERVAL = 100  # ≈ 6 % of training time at the CPU recipe (benches/probe_cost.py; target ≤ 10 %)
# The run's own settings: name -> (kind, default). Kinds as the dataclass annotations spell them.
RUN_SETTINGS = {
    "data": ("str | None", None), "out_dir": ("str", "out"), "init": ("str", "gpt2"), "tokenizer": ("str", "char"),
    "probe_interval": ("int", DEFAULT_PROBE_INTERVAL), "max_time": ("float | None", None),
    "log_interval": ("int", 10), "keep_every": ("int", 1), "init_from": ("str", "scratch"),
    "preset": ("str | None", None),
    **NANOGPT_RUN_SETTINGS,  # train.py's own: dataset, eval_only, always_save_checkpoint, wandb_*, backend
}
TRAIN_SETTINGS = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
MODEL_SETTINGS = {f.name: f.type for f in dataclasses.fields(GPTConfig)}



# -- the command line ------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> Settings:
    run = {name: default for name, (_, default) in RUN_SETTINGS.items()}
    train, model, given = {}, {}, set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            if "=" in arg:
                raise UsageError(f"unexpected argument {arg!r}: settings are written --key=value (e.g. --max_iters=200)")
            args[0:0] = config_file_args(arg)  # train.py's config file, read (never run) where it stands
            continue
        key, eq, value = arg[2:].partition("=")
        key = key.replace("-", "_")
        if key == "resume" and not eq:
            run["init_from"] = "resume"
            given.add("init_from")
            continue
        if not eq:
            if not args or args[0].startswith("--"):
                raise UsageError(f"--{key} needs a value: write --{key}=VALUE")
            value = args.pop(0)
        given.add(key)
        if key in RUN_SETTINGS:
            run[key] = parse_value(key, RUN_SETTINGS[key][0], value)
        elif key in TRAIN_SETTINGS:
            train[key] = parse_value(key, TRAIN_SETTINGS[key], value)
        elif key in MODEL_SETTINGS:
            model[key] = parse_value(key, MODEL_SETTINGS[key], value)
        else:
            known = [*RUN_SETTINGS, *TRAIN_SETTINGS, *MODEL_SETTINGS]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean --{close[0]}?" if close else "see `python -m gptcore.train --help`"
            raise UsageError(f"--{key}: unknown setting; {hint}")
    if "dataset" in given and run["dataset"] is not None:  # train.py reads data/<dataset> from where it runs
        if "data" in given:
            raise UsageError(f"--dataset={run['dataset']} and --data={run['data']} both name the data; keep one")
        run["data"] = str(Path("data") / run["dataset"])
        given.add("data")
    if run["init_from"] not in ("scratch", "resume"):
        raise UsageError(f"--init_from={run['init_from']}: use scratch (a new run) or resume (continue out_dir's run)")
    if run["tokenizer"] not in ("char", "gpt2"):
        raise UsageError(f"--tokenizer={run['tokenizer']}: use char (one id per character) or gpt2 (GPT-2's BPE)")
    for name in ("probe_interval", "keep_every", "log_interval"):
        if run[name] < (0 if name == "probe_interval" else 1):
            raise UsageError(f"--{name}={run[name]}: must be at least {0 if name == 'probe_interval' else 1}")
    if run["max_time"] is not None and run["max_time"] <= 0:
        raise UsageError(f"--max_time={run['max_time']}: give a number of seconds above 0 (or leave it out)")
    return Settings(run, train, model, given)


def parse_value(key: str, kind: str, text: str):
    """`text` as the setting's type; None allowed where the field is Optional."""
    optional = kind.endswith("| None")
    base = kind.split("|")[0].strip()
    if optional and text.strip().lower() in ("none", "null", ""):
        return None
    if base == "bool":
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise UsageError(f"--{key}={text}: expected True or False")
    if base == "int":
        try:
            number = float(text.replace("_", ""))
        except ValueError:
            raise UsageError(f"--{key}={text}: expected a whole number") from None
        if not number.is_integer():
            raise UsageError(f"--{key}={text}: expected a whole number")
        return int(number)
    if base == "float":
        try:
            return float(text.replace("_", ""))
        except ValueError:
            raise UsageError(f"--{key}={text}: expected a number (e.g. 1e-3)") from None
    return text


def usage() -> str:
    lines = [__doc__.strip(), "", "settings and their defaults:"]
    train = TrainConfig.cpu_recipe()
    lines += [f"  --{k}={v}" for k, (_, v) in RUN_SETTINGS.items()]
    lines += [f"  --{k}={getattr(train, k)}" for k in TRAIN_SETTINGS]
    model = GPTConfig(**CPU_RECIPE_MODEL)
    lines += [f"  --{k}={getattr(model, k)}" for k in MODEL_SETTINGS if k != "vocab_size"]
    lines.append("  --vocab_size: the corpus's (a larger value pads the embedding, as nanoGPT's 50304)")
    return "\n".join(lines)


# -- putting it together ---------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(usage())
        return 0
    from gptcore.training.distributed import place

    where = place()  # torchrun's WORLD_SIZE / RANK / LOCAL_RANK; one process without them
    rank = where.rank
    try:
        settings = parse_args(argv)
        from gptcore.training.setup import plan_run

        plan = plan_run(settings, argv, where)
    except ValueError as exc:
        if rank == 0:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    from gptcore.training.loop import TrainingRun
    from gptcore.training.trainer import TrainingError

    run = TrainingRun(plan)
    try:
        try:
            run.setup()
        except (ValueError, TrainingError) as exc:
            if rank == 0:
                print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted while starting; nothing was trained", file=sys.stderr)
            return 130
        try:
            return run.run()
        except (ValueError, TrainingError) as exc:  # e.g. a full disk: the trace's error record says it too
            print(f"error: {exc}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print(f"interrupted twice: stopped without saving; {plan.out_dir} keeps the checkpoint of the last eval",
              file=sys.stderr)
        return 130
    finally:
        from gptcore.training.distributed import finish_distributed

        finish_distributed()


if __name__ == "__main__":
    sys.exit(main())
