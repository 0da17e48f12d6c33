"""From a parsed command line to a `RunPlan`: the corpus, the configs, the device, the process
group — every refusal made here, before a model is built or the run folder is touched.

Why it is separate from the loop: every check here is cheap and closed-form (a config that will
not fit in memory is refused from its parameter count, not by trying), and under torchrun every
process makes the same checks before joining the process group, so a bad setting fails each of
them at once instead of leaving the others waiting for a peer that has exited.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from gptcore.model.config import GPTConfig
from gptcore.model.init import INIT_SCHEMES
from gptcore.training.config import CPU_RECIPE_MODEL, TrainConfig
from gptcore.training.data import load_corpus
from gptcore.training.distributed import Place, init_distributed, place
from gptcore.training.nanogpt_cli import notes as nanogpt_notes
from gptcore.training.run import RunFolder

MEMORY_HEADROOM = 0.9  # refuse a run estimated above this share of the free memory


class UsageError(ValueError):
    """A command line that cannot run; the message names the setting and what to write instead."""


@dataclasses.dataclass
class Settings:
    """The command line, parsed: values by group, and which names the user gave (not defaults)."""

    run: dict
    train: dict  # only what the command line set
    model: dict  # only what the command line set
    given: set = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class RunPlan:
    """What to run, decided from the command line (train.py) before anything is built; plan_run
    builds it, loop.TrainingRun runs it."""

    out_dir: Path
    train_config: TrainConfig
    model_config: GPTConfig | None  # None on resume: the checkpoint has it
    corpus: object  # data.Corpus
    schemes: tuple[str, ...]
    probe_interval: int
    max_time: float | None
    log_interval: int = 10
    keep_every: int = 1
    resume: bool = False
    command: list[str] = dataclasses.field(default_factory=list)
    corpus_source: str | None = None
    world_size: int = 1
    rank: int = 0
    device: str = "cpu"
    preset: str | None = None  # presets.PRESETS name: its data replaces --data, and a resume re-creates it
    eval_only: bool = False  # train.py's: evaluate at step 0, then stop
    always_save_checkpoint: bool = True  # train.py's: False writes ckpt.pt only when val improved
    notes: list[str] = dataclasses.field(default_factory=list)  # settings accepted but not used, and why


def parse_schemes(text: str) -> tuple[str, ...]:
    schemes = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in schemes if s not in INIT_SCHEMES]
    if not schemes or unknown:
        raise UsageError(f"--init={text}: {'unknown scheme ' + repr(unknown[0]) if unknown else 'no scheme given'}; "
                         f"choose one or a comma list of {', '.join(INIT_SCHEMES)}")
    if len(set(schemes)) != len(schemes):
        raise UsageError(f"--init={text}: a scheme is listed twice; list each once")
    return schemes


def plan_run(settings: Settings, argv: list[str], where: Place | None = None) -> RunPlan:
    where = place() if where is None else where
    world_size = where.world_size
    run, given = settings.run, settings.given
    folder = RunFolder(run["out_dir"])
    resume = run["init_from"] == "resume"
    chosen = _resumed_choices(settings, folder) if resume else _new_choices(settings, folder)
    schemes, preset, train_values, data = chosen.schemes, chosen.preset, chosen.train_values, chosen.data

    device = _pick_device(train_values.get("device") if ("device" in given or resume) else None, world_size,
                          where.local_rank)
    train_values["device"] = device
    train_config = TrainConfig.from_dict(train_values)
    train_config.local_accumulation(world_size)  # refuse an accumulation the processes cannot share

    corpus = load_corpus(data, chosen.tokenizer) if preset is None else _preset(preset, given).make_corpus()
    model_config = None
    if not resume:
        model_base = (CPU_RECIPE_MODEL if preset is None else _preset(preset, given).model)
        model_config = GPTConfig(**{**model_base, "vocab_size": corpus.vocab_size, **settings.model})
        corpus.check_vocab(model_config.vocab_size, what=f"--vocab_size={model_config.vocab_size}")
        corpus.check_block_size(model_config.block_size)
        check_fits(model_config, train_config, len(schemes), device)

    init_distributed(world_size, device)
    return RunPlan(out_dir=folder.root, train_config=train_config, model_config=model_config, corpus=corpus,
                   schemes=schemes, probe_interval=chosen.probe_interval, max_time=chosen.max_time,
                   log_interval=run["log_interval"], keep_every=run["keep_every"], resume=resume,
                   command=["python", "-m", "gptcore.train", *argv],
                   corpus_source=None if data is None else str(Path(data).expanduser().resolve()),
                   world_size=world_size, rank=where.rank, device=device, preset=preset,
                   eval_only=bool(run.get("eval_only")), always_save_checkpoint=run.get("always_save_checkpoint", True),
                   notes=nanogpt_notes(run, given))


@dataclasses.dataclass
class _Choices:
    """What the run trains and on what: the run folder's record on resume (the command line may
    override some), the command line over the recipe or preset otherwise."""

    schemes: tuple[str, ...]
    preset: str | None
    train_values: dict
    data: str | None
    tokenizer: str
    probe_interval: int
    max_time: float | None


def _resumed_choices(settings: Settings, folder: RunFolder) -> _Choices:
    run, given = settings.run, settings.given
    from gptcore.training.nanogpt_resume import is_nanogpt_out_dir, nanogpt_run_meta

    # nanoGPT's own out_dir (ckpt.pt, no run.json): its checkpoint says what a run.json would
    meta = (nanogpt_run_meta(folder, run["data"] if "data" in given else None) if is_nanogpt_out_dir(folder)
            else folder.read_meta())
    if settings.model:
        name = next(iter(settings.model))
        raise UsageError(f"--{name}: a resumed run's model comes from its checkpoint; drop the model settings "
                         f"(or start a new run in another --out_dir)")
    schemes = tuple(meta["schemes"])
    if "init" in given and parse_schemes(run["init"]) != schemes:
        raise UsageError(f"--init={run['init']}: the run in {folder.root} trains {','.join(schemes)}; "
                         f"leave --init out to resume it")
    preset = meta.get("preset")
    if "preset" in given and run["preset"] != preset:
        raise UsageError(f"--preset={run['preset']}: the run in {folder.root} was started "
                         f"{'with --preset=' + preset if preset else 'without a preset'}; leave --preset out to resume it")
    tokenizer = run["tokenizer"] if "tokenizer" in given else meta["tokenizer"].get("kind", "char")
    return _Choices(
        schemes=schemes, preset=preset, train_values={**meta["train_config"], **settings.train},
        data=run["data"] if "data" in given else meta["corpus"].get("source"),
        tokenizer=tokenizer if tokenizer in ("char", "gpt2") else "char",  # a prepared folder brings its own
        probe_interval=run["probe_interval"] if "probe_interval" in given else meta.get("probe_interval", 0),
        max_time=run["max_time"] if "max_time" in given else None)


def _new_choices(settings: Settings, folder: RunFolder) -> _Choices:
    run = settings.run
    if folder.exists() or folder.trace.exists():
        raise UsageError(f"{folder.root} already holds a run; continue it with --init_from=resume (or --resume), "
                         f"or choose another --out_dir")
    schemes = parse_schemes(run["init"])
    preset = run.get("preset")
    base = TrainConfig.cpu_recipe() if preset is None else _preset(preset, settings.given).train_config()
    return _Choices(schemes=schemes, preset=preset, train_values={**base.to_dict(), **settings.train},
                    data=run["data"], tokenizer=run["tokenizer"], probe_interval=run["probe_interval"],
                    max_time=run["max_time"])


def _preset(name: str, given: set):
    """The named preset (presets.PRESETS); it brings its own data, so --data/--tokenizer cannot join it."""
    from gptcore.training.presets import PRESETS

    if name not in PRESETS:
        raise UsageError(f"--preset={name}: no such preset; choose one of {', '.join(PRESETS)}")
    clash = [key for key in ("data",) if key in given]
    if clash:
        raise UsageError(f"--preset={name} brings its own data ({PRESETS[name].description}); drop --{clash[0]}")
    return PRESETS[name]


def _pick_device(asked: str | None, world_size: int, local_rank: int) -> str:
    import torch

    from gptcore.io.loading import default_device

    if asked is None:  # the library's one "auto" rule; a run is not started on Apple's MPS unasked
        best = default_device()
        asked = "cpu" if best.type == "mps" else str(best)
    if asked.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device={asked}: torch sees no CUDA GPU here; use --device=cpu")
        if world_size > 1:
            asked = f"cuda:{local_rank}"  # one GPU per process, as torchrun numbers them
    else:
        try:
            torch.device(asked)
        except RuntimeError:
            raise UsageError(f"--device={asked}: not a device torch knows; use cpu or cuda") from None
    return asked


# -- memory ----------------------------------------------------------------------------------------
def training_memory(model: GPTConfig, train: TrainConfig, n_schemes: int) -> int:
    """Bytes one process needs, roughly: weights + gradients + Adam's two moments per scheme (fp32,
    params.py), plus one micro-batch's activations (Korthikanti et al. 2022: s·b·h·34 bytes per
    layer at 16 bits, doubled in fp32; their 5·a·s²·b term for the stored attention scores is left
    out because training runs the fused attention kernel, which never keeps the (T, T) scores) and
    the logits with their gradient. "auto" counts as float32: an estimate that errs high."""
    from gptcore.model.params import count_parameters

    b, s, h = train.batch_size, model.block_size, model.n_embd
    act_scale = 1.0 if train.dtype in ("bfloat16", "float16") else 2.0
    activations = s * b * h * 34 * model.n_layer * act_scale
    logits = 3 * b * s * model.vocab_size * 4  # logits, softmax, their gradient (fp32)
    return int(n_schemes * count_parameters(model).training_bytes("fp32") + activations + logits)


def free_memory(device: str) -> int | None:
    """Bytes free on `device` now, or None when it cannot be told."""
    from gptcore.model.device_memory import free_bytes

    return free_bytes(device)


def check_fits(model: GPTConfig, train: TrainConfig, n_schemes: int, device: str) -> int:
    from gptcore.model.params import format_bytes

    need = training_memory(model, train, n_schemes)
    free = free_memory(device)
    if free is not None and need > MEMORY_HEADROOM * free:
        raise UsageError(
            f"this run needs about {format_bytes(need)} on {device} (weights, gradients and Adam state for "
            f"{n_schemes} model(s) of {model.n_layer} layers × {model.n_embd} wide, plus activations of "
            f"batch_size={train.batch_size} × block_size={model.block_size}) but only {format_bytes(free)} is "
            f"free; make the model smaller (n_layer, n_embd), lower batch_size (raise gradient_accumulation_steps "
            f"to keep the batch), or train fewer init schemes at once")
    return need
