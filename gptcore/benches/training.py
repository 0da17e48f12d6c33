"""`python -m gptcore.bench --train [--device cpu|cuda] [--nanogpt PATH] [--iters N] [--loss]`: our
Trainer against nanoGPT's model.py + train.py's loop, side by side in one process on one device.

What is trained (training_recipes.py): on a CPU nanoGPT's CPU recipe (4 layers, 128 wide, block
64, batch 12, char-level text), both sides eager unless `--compile`; on CUDA GPT-2 124M at batch 12,
block 1024, bfloat16 autocast, both sides under torch.compile (train.py's default) unless
`--no-compile`. Both sides get the same batches, made before the clock starts, so the figures are
the training step alone.

- timing (always): both sides in this process, in alternating blocks of `--block` iterations
  (the side that goes first alternates too) after a warm-up (which, compiled, holds the compile),
  so load from other processes on a shared machine falls on both alike; each block ends waiting
  for the device, so its time is the work's, not the queueing's. ms/iteration is the median over
  blocks, the ratio the median over rounds of the two adjacent blocks' ratio (load drifts between
  rounds, less within one); process CPU time and tokens/s are shown too. Each side reads its loss
  every `--log-interval` iterations, as its loop would (train.py's log line; our loop's trace
  records, read together on CUDA). Ours is the Trainer as `python -m gptcore.train` builds it:
  TrainConfig's dtype "auto" (on a CPU bfloat16 autocast where timing the model both ways finds it
  faster: training/autocast_choice.py; `--dtype` overrides), AdamW fused where faster; nanoGPT's
  is train.py's setup on that device (a CPU: float32, non-fused AdamW; CUDA: its autocast, fused
  AdamW). Targets: on a CPU our iterations per second >= 1.25x nanoGPT's; on CUDA >= 1.0x
  (issue 37: no slower than nanoGPT compiled).
- compute: each side's achieved FLOP/s (benches/flops.py: nanoGPT's estimate_mfu count); on a CPU
  beside this machine's matmul peak measured in the same run, on CUDA as MFU of the GPU's datasheet
  bf16 peak (by its name) and beside a bf16 matmul peak measured now.
- `--loss` (CPU recipe): trains both from their own seeded initialisation for max(--loss-iters)
  iterations on the same batches and prints the val loss (same --eval-iters val batches for both)
  at 100, 250, 500, 1000, 2000 ... Target: ours <= nanoGPT's at 500 and 2000. When ours runs in
  bfloat16, a third column trains ours in float32 too, to show bf16 stays within the noise.

Without nanoGPT's model.py (not at --nanogpt PATH nor at ../shared/reference/nanogpt_model.py
beside the checkout) the bench says so and times ours alone.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from gptcore.model.config import GPTConfig
from gptcore.model.params import count_parameters
from gptcore.training import speed
from gptcore.training.trainer import Trainer
from gptcore.benches import flops
from gptcore.benches.nanogpt_loop import NanoGPTLoop, default_nanogpt_path, load_nanogpt
from gptcore.benches.timing import machine_line, sync
from gptcore.benches.training_recipes import Recipe, recipe_for

TARGET_RATIO = {"cpu": 1.25, "cuda": 1.0}
EVAL_POINTS = (100, 250, 500, 1000, 2000, 5000)
MISSING = "nanoGPT's model.py not found at {path} (pass --nanogpt PATH): timing ours only"
LOG_INTERVAL = 10  # nanoGPT's config/train_gpt2.py and train_shakespeare_char.py, and our loop's default


def time_interleaved(steps: dict, batches: list, iters: int, block: int, warmup: int, device="cpu") -> dict:
    """{name: [(wall ms, process CPU ms) per iteration of each block]}: each side steps through
    `batches` in turn, blocks alternating between the sides, the first side alternating from round
    to round, each block ending with a wait for `device`. CPU time is the steadier figure on a
    busy machine (time spent waiting for a core is not in it); wall time is what a user waits."""
    names = list(steps)
    cursor = {name: 0 for name in names}
    device = torch.device(device)

    def run(name: str, n: int) -> tuple[float, float]:
        sync(device)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            x, y = batches[cursor[name] % len(batches)]
            cursor[name] += 1
            steps[name](x, y)
        sync(device)
        return (time.perf_counter() - wall) / n * 1e3, (time.process_time() - cpu) / n * 1e3

    for name in names:
        if warmup:
            run(name, warmup)
    samples = {name: [] for name in names}
    for r in range(max(1, math.ceil(iters / block))):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(run(name, block))
    return samples


def our_step(trainer: Trainer, log_interval: int):
    """Our side's iteration as the run's loop does it: launch the step, read the figures at log
    steps (every step where reading costs nothing, on a CPU)."""

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        trainer.launch(x, y)
        if trainer.reads_every_step or trainer.iter_num % log_interval == 0:
            _, error = trainer.collect()
            if error is not None:
                raise error

    return step


def run_train_bench(nanogpt: str | None = None, iters: int = 200, block: int = 10, warmup: int = 10,
                    dtype: str = "auto", loss_iters=(), eval_iters: int = 40, seed: int = 1337, say=print,
                    same_init: bool = False, peak_size: int | None = None, device="cpu", compile: bool | None = None,
                    log_interval: int = LOG_INTERVAL) -> dict:
    """Prints the report through `say`; returns its figures (ms/iter, ratio, FLOP/s, val losses)."""
    device = torch.device(device)
    speed.use_tf32(device)  # both sides share the process
    recipe = recipe_for(device, dtype, seed, eval_iters, compile)
    path = Path(nanogpt) if nanogpt else default_nanogpt_path()
    module = load_nanogpt(path) if path.is_file() else None
    say(f"training bench: {recipe.description}")
    say(f"machine: {machine_line()}; {_device_line(device)}")
    ours = recipe.ours()
    chosen = ours.dtype  # what "auto" became here
    _describe_sides(ours, module, path, recipe, device, log_interval, say)
    result = dict(dtype=chosen, nanogpt=str(path) if module else None, device=str(device), compiled=recipe.compile)

    batches = recipe.batches(max(iters, block) + warmup)
    steps = {"ours": our_step(ours, log_interval)}
    if module is not None:
        steps["nanoGPT"] = NanoGPTLoop(module, recipe.model_args, recipe.config, device, recipe.compile,
                                       recipe.nanogpt_dtype, log_interval).step
    if recipe.compile:
        say("compiling both sides in the warm-up (torch.compile; a minute or more on a first run)")
    samples = time_interleaved(steps, batches, iters, block, warmup, device)
    if ours.compile_failure:
        say(f"  ours: {ours.compile_failure}")
    say(f"timing: {len(samples['ours']) * block} iterations each in blocks of {block}, sides alternating, after "
        f"{warmup} warm-up; medians (the machine may be shared: other processes load both sides alike)")
    _report_timing(samples, result, recipe, device, module is not None, say)
    config = GPTConfig(**recipe.model_args)
    if device.type == "cuda":
        result.update(gpu_compute_report(config, recipe.rows, result, chosen, device, say, peak_size))
    else:
        result.update(compute_report(config, recipe.rows, result, chosen, say, peak_size or flops.PEAK_SIZE))
    if loss_iters:
        result["val_loss"] = loss_curves(recipe, module, max(loss_iters), say, same_init)
    return result


def _describe_sides(ours, module, path: Path, recipe, device: torch.device, log_interval: int, say) -> None:
    """Say how each side runs: dtype, AdamW kernel, compile, attention, how often figures are read."""
    chosen = ours.dtype
    say(f"ours: gptcore Trainer, {chosen + ' autocast' if chosen != 'float32' else 'float32'}, AdamW fused: "
        f"{bool(ours.optimizer.defaults.get('fused'))}, torch.compile: {ours.compiled}; attention: SDPA"
        f"{' (float32 under autocast)' if device.type == 'cpu' else ''}; figures read every "
        f"{1 if ours.reads_every_step else log_interval} iteration(s)")
    for choice in (ours.dtype_choice, ours.fused_choice):
        if choice is not None:
            say(f"  {choice.describe()}")
    if module is None:
        say(MISSING.format(path=path))
        return
    setup = ("float32 and non-fused AdamW, as train.py runs on a CPU" if device.type == "cpu"
             else f"{recipe.nanogpt_dtype} autocast and fused AdamW, as train.py runs on CUDA")
    say(f"nanoGPT: {path} + train.py's loop ({setup}; torch.compile: {recipe.compile}; loss read every "
        f"{log_interval} iterations)")


def _report_timing(samples: dict, result: dict, recipe, device: torch.device, compared: bool, say) -> None:
    """Each side's medians into `result` and said; with nanoGPT beside ours, the ratio against the target."""
    for name, blocks in samples.items():
        wall, cpu = [w for w, _ in blocks], [c for _, c in blocks]
        result[f"ms_per_iter_{name}"] = med = statistics.median(wall)
        result[f"cpu_ms_per_iter_{name}"] = statistics.median(cpu)
        result[f"tokens_per_s_{name}"] = recipe.tokens_per_iter / (med / 1e3)
        say(f"  {name:<8}{med:9.2f} ms/iter  {1e3 / med:7.1f} it/s  {recipe.tokens_per_iter / (med / 1e3):11,.0f} tok/s"
            f"   (best block {min(wall):.2f}, worst {max(wall):.2f}; process CPU time {statistics.median(cpu):.2f} ms/iter)")
    if not compared:
        say("ratio: n/a (no nanoGPT model.py to compare with)")
        return
    target = TARGET_RATIO.get(device.type, 1.0)
    ours_b, ref_b = samples["ours"], samples["nanoGPT"]
    paired = statistics.median(r[0] / o[0] for o, r in zip(ours_b, ref_b))  # each round: adjacent blocks
    of_medians = result["ms_per_iter_nanoGPT"] / result["ms_per_iter_ours"]
    of_cpu = result["cpu_ms_per_iter_nanoGPT"] / result["cpu_ms_per_iter_ours"]
    result.update(ratio=paired, ratio_of_medians=of_medians, ratio_cpu=of_cpu)
    verdict = "met" if paired >= target else "MISSED"
    say(f"ratio (ours it/s / nanoGPT it/s): {paired:.3f} (median over rounds of the two adjacent blocks' ratio)  "
        f"target >= {target}  {verdict}")
    say(f"  also: ratio of the wall medians {of_medians:.3f}; of the CPU-time medians {of_cpu:.3f}")


def _device_line(device: torch.device) -> str:
    if device.type == "cuda":
        return f"device: {torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    flags = sorted(speed.cpu_flags() & {"avx512_bf16", "amx_bf16"})
    return f"native bf16: {'yes (' + ', '.join(flags) + ')' if flags else 'no'}"


def compute_report(config: GPTConfig, rows: int, timed: dict, dtype: str, say=print,
                   peak_size: int = flops.PEAK_SIZE) -> dict:
    """Each side's achieved GFLOP/s (nanoGPT's estimate_mfu count of a step's flops over its median
    ms/iter) beside this machine's matrix-multiply peak measured now (fp32; bf16 too where ours
    runs under bf16 autocast): how far the step is from what the hardware can do."""
    work = flops.flops_per_iter(config, rows)
    peaks = {"fp32": flops.matmul_peak(torch.float32, peak_size)}
    if dtype == "bfloat16":
        peaks["bf16"] = flops.matmul_peak(torch.bfloat16, peak_size)
    say(f"compute: {work / 1e9:.3f} GFLOP per iteration (6·N·tokens + attention, nanoGPT's estimate_mfu; "
        f"N = {count_parameters(config).non_embedding:,} non-embedding parameters, {rows * config.block_size:,} tokens)")
    say("  peak: " + ", ".join(f"{name} matmul {value:.0f} GFLOP/s" for name, value in peaks.items())
        + f" (square {peak_size}², best of {flops.PEAK_REPS}, measured now)")
    out = {"gflop_per_iter": work / 1e9, **{f"peak_gflops_{k}": v for k, v in peaks.items()}}
    for name in ("ours", "nanoGPT"):
        if f"ms_per_iter_{name}" not in timed:
            continue
        achieved = flops.gflops(work, timed[f"ms_per_iter_{name}"])
        out[f"gflops_{name}"] = achieved
        shares = [f"{100 * achieved / peaks['fp32']:.0f} % of the fp32 matmul peak"]
        if name == "ours" and "bf16" in peaks:
            shares.insert(0, f"{100 * achieved / peaks['bf16']:.0f} % of the bf16 matmul peak (its autocast)")
        say(f"  {name:<8}{achieved:9.1f} GFLOP/s achieved = {'; '.join(shares)}")
    return out


def gpu_compute_report(config: GPTConfig, rows: int, timed: dict, dtype: str, device: torch.device, say=print,
                       peak_size: int | None = None) -> dict:
    """Each side's achieved TFLOP/s and MFU on this GPU: `mfu_report` with its name and a matmul
    peak measured now in the step's dtype."""
    size = peak_size or flops.CUDA_PEAK_SIZE
    kind = torch.bfloat16 if dtype == "bfloat16" else torch.float16 if dtype == "float16" else torch.float32
    measured = flops.matmul_peak(kind, size, reps=10, device=device) / 1e3  # TFLOP/s
    return mfu_report(config, rows, timed, torch.cuda.get_device_name(device), measured,
                      f"{str(kind).removeprefix('torch.')} matmul (square {size}², best of 10, now)", say)


def mfu_report(config: GPTConfig, rows: int, timed: dict, device_name: str, measured_tflops: float,
               measured_what: str, say=print) -> dict:
    """nanoGPT's estimate_mfu count of a step's flops over each side's median ms/iter, as a share
    of the GPU's datasheet bf16 dense peak (flops.DATASHEET_TFLOPS by name; absent for a GPU not
    in the table) and of the measured matmul peak `measured_tflops` (`measured_what` says which)."""
    work = flops.flops_per_iter(config, rows)
    sheet = flops.datasheet_tflops(device_name)
    say(f"compute: {work / 1e12:.2f} TFLOP per iteration (6·N·tokens + attention, nanoGPT's estimate_mfu; "
        f"N = {count_parameters(config).non_embedding:,} non-embedding parameters, {rows * config.block_size:,} tokens)")
    say(f"  peak: {device_name} bf16 dense {sheet:.0f} TFLOP/s (NVIDIA's datasheet, the table in benches/flops.py)"
        if sheet else f"  peak: {device_name} is not in the datasheet table (benches/flops.py): MFU against the "
                      f"measured peak only")
    say(f"  measured: {measured_what}: {measured_tflops:.0f} TFLOP/s")
    out = {"tflop_per_iter": work / 1e12, "peak_tflops_datasheet": sheet, "peak_tflops_measured": measured_tflops}
    for side in ("ours", "nanoGPT"):
        if f"ms_per_iter_{side}" not in timed:
            continue
        achieved = flops.gflops(work, timed[f"ms_per_iter_{side}"]) / 1e3
        out[f"tflops_{side}"] = achieved
        shares = [f"MFU {100 * achieved / sheet:.1f} % of the datasheet peak"] if sheet else []
        shares.append(f"{100 * achieved / measured_tflops:.1f} % of the measured matmul peak")
        if sheet:
            out[f"mfu_{side}"] = achieved / sheet
        say(f"  {side:<8}{achieved:9.1f} TFLOP/s achieved = {'; '.join(shares)}")
    return out


def loss_curves(recipe: Recipe, module, n_iters: int, say=print, same_init: bool = False) -> dict:
    """Train each side n_iters on the same batches; {side: {iteration: val loss}} at EVAL_POINTS.
    `same_init`: ours starts from nanoGPT's initial weights (renamed by convert.py), so the curves
    differ by the implementations alone, not by two draws of the initialisation."""
    corpus, model_args, cfg = recipe.corpus, recipe.model_args, recipe.config
    T, rows, seed = model_args["block_size"], cfg.tokens_per_iter, cfg.seed
    val = [corpus.batch("val", k, cfg.batch_size, T, seed, stream="eval") for k in range(cfg.eval_iters)]
    ref = NanoGPTLoop(module, model_args, cfg) if module is not None else None
    sides = {"ours": recipe.ours()}
    if sides["ours"].dtype != "float32":
        sides["ours float32"] = recipe.ours(cfg.replace(dtype="float32"))
    if ref is not None:
        sides["nanoGPT"] = ref
        if same_init:
            from gptcore.io.convert import convert_state_dict

            start_weights, _ = convert_state_dict(ref.raw_model.state_dict(), conv1d=False)
            for name in sides:
                if name != "nanoGPT":
                    sides[name].model.load_state_dict(start_weights, strict=True)
    points = [p for p in EVAL_POINTS if p < n_iters] + [n_iters]
    curves = {name: {} for name in sides}
    init = "ours from nanoGPT's initial weights" if same_init and ref is not None else "each its own initialisation"
    say(f"loss: {n_iters} iterations each on the same batches; val loss = mean of {cfg.eval_iters} val batches "
        f"(the same for every side); seed {seed}; {init}")
    say("  iter  " + "".join(f"{name:>15}" for name in sides))
    start = time.perf_counter()
    for it in range(n_iters):
        x, y = corpus.batch("train", it, rows, T, seed)
        for side in sides.values():
            side.step(x, y)
        if it + 1 in points:
            for name, side in sides.items():
                curves[name][it + 1] = _val_loss(side, val, corpus)
            say(f"  {it + 1:>4}  " + "".join(f"{curves[name][it + 1]:>15.4f}" for name in sides)
                + f"   ({time.perf_counter() - start:.0f} s)")
    return curves


def _val_loss(side, val: list, corpus=None) -> float:
    """Val loss of either side on the same batches; ours through Trainer.estimate_loss (its
    autocast, eval mode), which also scores as many train batches (read, then unused here)."""
    if isinstance(side, NanoGPTLoop):
        return side.val_loss(val)
    return side.estimate_loss(lambda split, k: val[k] if split == "val" else _train_eval_batch(corpus, side, k))["val"]


def _train_eval_batch(corpus, trainer: Trainer, k: int):
    T = trainer.model.config.block_size
    return corpus.batch("train", k, trainer.config.batch_size, T, trainer.config.seed, stream="eval")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train", action="store_true", help="this bench (the training step against nanoGPT)")
    parser.add_argument("--device", default=None,
                        help="cpu (nanoGPT's CPU recipe) or cuda (GPT-2 124M, batch 12, bf16); default: cuda if present")
    parser.add_argument("--nanogpt", default=None, metavar="PATH",
                        help="nanoGPT's model.py (default: ../shared/reference/nanogpt_model.py beside the checkout)")
    parser.add_argument("--iters", type=int, default=200, help="timed iterations per side (default 200)")
    parser.add_argument("--block", type=int, default=10, help="iterations per interleaved block (default 10)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed iterations per side first (default 10)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                        help="the autocast dtype (auto: on a CPU bfloat16 where timed faster here, else float32; "
                             "on CUDA train.py's bfloat16 where supported)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile both sides (default: on CUDA yes, as train.py; on a CPU no)")
    parser.add_argument("--log-interval", type=int, default=LOG_INTERVAL,
                        help=f"iterations between reads of the loss, both sides (default {LOG_INTERVAL}, "
                             f"nanoGPT's train_gpt2.py and our loop's)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")
    parser.add_argument("--loss", action="store_true", help="also train both and compare val loss (CPU recipe)")
    parser.add_argument("--loss-iters", default="500,2000", help="iterations of the --loss run (its largest counts)")
    parser.add_argument("--eval-iters", type=int, default=40, help="val batches per loss estimate (default 40)")
    parser.add_argument("--same-init", action="store_true",
                        help="--loss: ours starts from nanoGPT's initial weights (default: each its own, seeded alike)")
    parser.add_argument("--peak-size", type=int, default=None,
                        help=f"side of the square matmul timed for the peak (default {flops.PEAK_SIZE} on a CPU, "
                             f"{flops.CUDA_PEAK_SIZE} on CUDA)")
    parser.add_argument("--seed", type=int, default=1337, help="seeds both initialisations and the batches (train.py's 1337)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcore.bench --train", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("iters", "block", "eval_iters", "log_interval"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be 1 or more")
    if args.peak_size is not None and args.peak_size < 1:
        parser.error("--peak-size must be 1 or more")
    from gptcore.io.loading import LoadError, resolve_device

    try:
        device = resolve_device(args.device)  # gptcore's one "auto" rule; a GPU asked for and absent is named
    except LoadError as exc:
        parser.error(f"--device={args.device}: {exc}")
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device={args.device}: the training bench has a recipe for cpu and cuda only")
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be 1 or more")
        torch.set_num_threads(args.threads)
    try:
        loss_iters = [int(v) for v in args.loss_iters.split(",")] if args.loss else []
    except ValueError:
        parser.error(f"--loss-iters takes comma-separated whole numbers, got {args.loss_iters!r}")
    if any(n < 1 for n in loss_iters):
        parser.error("--loss-iters must be 1 or more")
    if loss_iters and device.type != "cpu":
        parser.error("--loss trains the CPU recipe's char model and compares its val loss; run it with --device cpu")
    run_train_bench(args.nanogpt, args.iters, args.block, max(0, args.warmup), args.dtype, loss_iters,
                    args.eval_iters, args.seed, say=lambda line: print(line, flush=True), same_init=args.same_init,
                    peak_size=args.peak_size, device=device, compile=args.compile, log_interval=args.log_interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
