"""`python -m gptcore.bench --train [--nanogpt PATH] [--iters N] [--loss]`: our Trainer against
nanoGPT's model.py + train.py's loop, on nanoGPT's CPU recipe.

The recipe: 4 layers, 4 heads, 128 wide, block 64, batch 12, lr 1e-3 (warmup 100, cosine to 1e-4
at 2000), beta2 0.99, dropout 0, no bias, nanoGPT's exact GELU; char-level text of CPython's
`pydoc_data.topics` (the default corpus of `python -m gptcore.train`). Both sides get the same
batches (gptcore.training.data: batch `it` seeded by (seed, it)), made before the clock starts, so
the figures are the training step alone.

- timing (always): both sides in this process, in alternating blocks of `--block` iterations
  (the side that goes first alternates too) after a warm-up, so load from other processes on a
  shared machine falls on both alike; ms/iteration is the median over blocks, the ratio the
  median over rounds of the two adjacent blocks' ratio (load drifts between rounds, less within
  one); process CPU time is shown too. Then each side's achieved GFLOP/s (benches/flops.py:
  nanoGPT's estimate_mfu count) beside this machine's matmul peak, measured in the same run. Target: our iterations per second >= 1.25x nanoGPT's. Ours is the Trainer as `python -m gptcore.train`
  builds it: TrainConfig's dtype "auto" (bfloat16 autocast where timing the model both ways finds it
  faster, else float32: training/autocast_choice.py; `--dtype` overrides) and fused AdamW; nanoGPT's is float32 with its non-fused AdamW, as train.py runs
  on a CPU.
- `--loss`: trains both from their own seeded initialisation for max(--loss-iters) iterations
  on the same batches and prints the val loss (same --eval-iters val batches for both) at
  100, 250, 500, 1000, 2000 ... Target: ours <= nanoGPT's at 500 and 2000. When ours runs in
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
from gptcore.model.gpt import GPT
from gptcore.model.params import count_parameters
from gptcore.training import speed
from gptcore.training.config import CPU_RECIPE_MODEL, TrainConfig
from gptcore.training.data import load_corpus
from gptcore.training.trainer import Trainer
from gptcore.benches import flops
from gptcore.benches.nanogpt_loop import NanoGPTLoop, default_nanogpt_path, load_nanogpt
from gptcore.benches.timing import machine_line

TARGET_RATIO = 1.25
EVAL_POINTS = (100, 250, 500, 1000, 2000, 5000)
MISSING = "nanoGPT's model.py not found at {path} (pass --nanogpt PATH): timing ours only"


def make_ours(model_args: dict, cfg: TrainConfig) -> Trainer:
    """Our side, built the way gptcore.training.loop builds a run's trainer."""
    return Trainer(GPT(GPTConfig(**model_args), init="gpt2", seed=cfg.seed), cfg, device="cpu")


def time_interleaved(steps: dict, batches: list, iters: int, block: int, warmup: int) -> dict:
    """{name: [(wall ms, process CPU ms) per iteration of each block]}: each side steps through
    `batches` in turn, blocks alternating between the sides, the first side alternating from round
    to round. CPU time is the steadier figure on a busy machine (time spent waiting for a core is
    not in it); wall time is what a user waits."""
    names = list(steps)
    cursor = {name: 0 for name in names}

    def run(name: str, n: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            x, y = batches[cursor[name] % len(batches)]
            cursor[name] += 1
            steps[name](x, y)
        return (time.perf_counter() - wall) / n * 1e3, (time.process_time() - cpu) / n * 1e3

    for name in names:
        if warmup:
            run(name, warmup)
    samples = {name: [] for name in names}
    for r in range(max(1, math.ceil(iters / block))):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(run(name, block))
    return samples


def run_train_bench(nanogpt: str | None = None, iters: int = 200, block: int = 10, warmup: int = 10,
                    dtype: str = "auto", loss_iters=(), eval_iters: int = 40, seed: int = 1337, say=print,
                    same_init: bool = False, peak_size: int = flops.PEAK_SIZE) -> dict:
    """Prints the report through `say`; returns its figures (ms/iter, ratio, val losses)."""
    corpus = load_corpus()
    cfg = TrainConfig.cpu_recipe(dtype=dtype, eval_iters=eval_iters, seed=seed)
    model_args = dict(CPU_RECIPE_MODEL, vocab_size=corpus.vocab_size)
    T, rows = model_args["block_size"], cfg.tokens_per_iter
    path = Path(nanogpt) if nanogpt else default_nanogpt_path()
    module = load_nanogpt(path) if path.is_file() else None
    flags = sorted(speed.cpu_flags() & {"avx512_bf16", "amx_bf16"})
    say(f"training bench: nanoGPT's CPU recipe ({model_args['n_layer']} layers, {model_args['n_head']} heads, "
        f"{model_args['n_embd']} wide, block {T}, batch {rows}), char-level {corpus.name} ({corpus.vocab_size} symbols)")
    say(f"machine: {machine_line()}; native bf16: {'yes (' + ', '.join(flags) + ')' if flags else 'no'}")
    ours = make_ours(model_args, cfg)
    chosen = ours.dtype  # what "auto" became here
    say(f"ours: gptcore Trainer, {chosen + ' autocast' if chosen != 'float32' else 'float32'}, AdamW fused: "
        f"{bool(ours.optimizer.defaults.get('fused'))}; attention: SDPA (float32 under autocast)")
    if ours.dtype_choice is not None:
        say(f"  {ours.dtype_choice.describe()}")
    if module is None:
        say(MISSING.format(path=path))
    else:
        say(f"nanoGPT: {path} + train.py's loop (float32 and non-fused AdamW, as train.py runs on a CPU)")
    result = dict(dtype=chosen, nanogpt=str(path) if module else None)

    batches = [corpus.batch("train", it, rows, T, seed) for it in range(max(iters, block) + warmup)]
    steps = {"ours": ours.step}
    if module is not None:
        steps["nanoGPT"] = NanoGPTLoop(module, model_args, cfg).step
    samples = time_interleaved(steps, batches, iters, block, warmup)
    say(f"timing: {len(samples['ours']) * block} iterations each in blocks of {block}, sides alternating, after "
        f"{warmup} warm-up; medians (the machine may be shared: other processes load both sides alike)")
    for name, blocks in samples.items():
        wall, cpu = [w for w, _ in blocks], [c for _, c in blocks]
        result[f"ms_per_iter_{name}"] = med = statistics.median(wall)
        result[f"cpu_ms_per_iter_{name}"] = statistics.median(cpu)
        say(f"  {name:<8}{med:9.2f} ms/iter  {1e3 / med:7.1f} it/s   (best block {min(wall):.2f}, worst "
            f"{max(wall):.2f}; process CPU time {statistics.median(cpu):.2f} ms/iter)")
    if module is not None:
        ours_b, ref_b = samples["ours"], samples["nanoGPT"]
        paired = statistics.median(r[0] / o[0] for o, r in zip(ours_b, ref_b))  # each round: adjacent blocks
        of_medians = result["ms_per_iter_nanoGPT"] / result["ms_per_iter_ours"]
        of_cpu = result["cpu_ms_per_iter_nanoGPT"] / result["cpu_ms_per_iter_ours"]
        result.update(ratio=paired, ratio_of_medians=of_medians, ratio_cpu=of_cpu)
        verdict = "met" if paired >= TARGET_RATIO else "MISSED"
        say(f"ratio (ours it/s / nanoGPT it/s): {paired:.3f} (median over rounds of the two adjacent blocks' ratio)  "
            f"target >= {TARGET_RATIO}  {verdict}")
        say(f"  also: ratio of the wall medians {of_medians:.3f}; of the CPU-time medians {of_cpu:.3f}")
    else:
        say("ratio: n/a (no nanoGPT model.py to compare with)")
    result.update(compute_report(GPTConfig(**model_args), rows, result, chosen, say, peak_size))
    if loss_iters:
        result["val_loss"] = loss_curves(corpus, model_args, cfg, module, max(loss_iters), say, same_init)
    return result


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


def loss_curves(corpus, model_args: dict, cfg: TrainConfig, module, n_iters: int, say=print,
                same_init: bool = False) -> dict:
    """Train each side n_iters on the same batches; {side: {iteration: val loss}} at EVAL_POINTS.
    `same_init`: ours starts from nanoGPT's initial weights (renamed by convert.py), so the curves
    differ by the implementations alone, not by two draws of the initialisation."""
    T, rows, seed = model_args["block_size"], cfg.tokens_per_iter, cfg.seed
    val = [corpus.batch("val", k, cfg.batch_size, T, seed, stream="eval") for k in range(cfg.eval_iters)]
    ref = NanoGPTLoop(module, model_args, cfg) if module is not None else None
    sides = {"ours": make_ours(model_args, cfg)}
    if sides["ours"].dtype != "float32":
        sides["ours float32"] = make_ours(model_args, cfg.replace(dtype="float32"))
    if ref is not None:
        sides["nanoGPT"] = ref
        if same_init:
            from gptcore.io.convert import convert_state_dict

            start_weights, _ = convert_state_dict(ref.model.state_dict(), conv1d=False)
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
    parser.add_argument("--nanogpt", default=None, metavar="PATH",
                        help="nanoGPT's model.py (default: ../shared/reference/nanogpt_model.py beside the checkout)")
    parser.add_argument("--iters", type=int, default=200, help="timed iterations per side (default 200)")
    parser.add_argument("--block", type=int, default=10, help="iterations per interleaved block (default 10)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed iterations per side first (default 10)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                        help="our autocast dtype (auto: bfloat16 where timed faster here, else float32)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both sides (default: torch's)")
    parser.add_argument("--loss", action="store_true", help="also train both and compare val loss")
    parser.add_argument("--loss-iters", default="500,2000", help="iterations of the --loss run (its largest counts)")
    parser.add_argument("--eval-iters", type=int, default=40, help="val batches per loss estimate (default 40)")
    parser.add_argument("--same-init", action="store_true",
                        help="--loss: ours starts from nanoGPT's initial weights (default: each its own, seeded alike)")
    parser.add_argument("--peak-size", type=int, default=flops.PEAK_SIZE,
                        help=f"side of the square matmul timed for the machine's peak (default {flops.PEAK_SIZE})")
    parser.add_argument("--seed", type=int, default=1337, help="seeds both initialisations and the batches (train.py's 1337)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcore.bench --train", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("iters", "block", "eval_iters", "peak_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be 1 or more")
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
    run_train_bench(args.nanogpt, args.iters, args.block, max(0, args.warmup), args.dtype, loss_iters,
                    args.eval_iters, args.seed, say=lambda line: print(line, flush=True), same_init=args.same_init,
                    peak_size=args.peak_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
