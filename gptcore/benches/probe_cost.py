"""`python -m gptcore.benches.probe_cost [--interval N] [--rounds R]`: what the training probes
cost, as a share of training time, at nanoGPT's CPU recipe on the default corpus.

The probes (training/recorder.py: head census, residual norms, attention of the probe prompt, the
ICL score, a 48-token sample) run every `probe_interval` steps of `python -m gptcore.train`; the
issue's target is ≤ 10 % of training time at the default interval. Measured in one process,
interleaved: R rounds of (`--steps` timed optimizer steps, one timed probe), so a burst of load from
other processes on a shared machine falls on both. The share is median(probe) / (interval ×
median(step)), in wall time and in CPU time (the process's, all threads: what the work costs,
nearly independent of other processes' load). Steps run on a model that is training, as in a run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the training command does, before torch loads


def main(argv=None) -> int:
    from gptcore.model.config import GPTConfig
    from gptcore.model.gpt import GPT
    from gptcore.train import DEFAULT_PROBE_INTERVAL
    from gptcore.training.config import CPU_RECIPE_MODEL, TrainConfig
    from gptcore.training.data import load_corpus
    from gptcore.training.recorder import Recorder
    from gptcore.training.run import RunFolder
    from gptcore.training.trainer import Trainer
    from gptcore.benches.timing import machine_line

    p = argparse.ArgumentParser(prog="python -m gptcore.benches.probe_cost", description=__doc__.splitlines()[0])
    p.add_argument("--interval", type=int, default=DEFAULT_PROBE_INTERVAL, help="probe_interval to price")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="timed steps per round")
    args = p.parse_args(argv)

    corpus = load_corpus()
    cfg = TrainConfig.cpu_recipe()
    model = GPT(GPTConfig(**{**CPU_RECIPE_MODEL, "vocab_size": corpus.vocab_size}), seed=cfg.seed)
    trainer = Trainer(model, cfg)
    rows = cfg.gradient_accumulation_steps * cfg.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        recorder = Recorder(RunFolder(tmp), corpus, model.config.block_size, cfg.seed)
        it = 0

        def step() -> tuple[float, float]:
            nonlocal it
            x, y = corpus.batch("train", it, rows, model.config.block_size, cfg.seed)  # (rows, T) each
            wall, cpu = time.perf_counter(), time.process_time()
            trainer.step(x, y)
            it += 1
            return time.perf_counter() - wall, time.process_time() - cpu

        def probe() -> tuple[float, float]:
            wall, cpu = time.perf_counter(), time.process_time()
            recorder.probe(trainer.model, "gpt2", it)
            return time.perf_counter() - wall, time.process_time() - cpu

        for _ in range(5):
            step()  # warm-up
        probe()
        steps, probes = [], []
        for _ in range(args.rounds):
            steps += [step() for _ in range(args.steps)]
            probes.append(probe())
    print(f"machine: {machine_line()}, dtype {trainer.dtype}")
    for i, clock in enumerate(("wall", "CPU")):  # CPU time: what the work costs on idle cores, whatever the load
        step_s = statistics.median(s[i] for s in steps)
        probe_s = statistics.median(p[i] for p in probes)
        share = probe_s / (args.interval * step_s)
        print(f"{clock} time: step {step_s * 1000:.1f} ms (median of {len(steps)}), probe {probe_s * 1000:.0f} ms "
              f"(median of {len(probes)}) -> probe_interval={args.interval}: probes cost {100 * share:.1f} % of "
              f"training time (target <= 10 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
