"""One training run end to end: every init scheme stepped on the same batches, evaluated, probed,
checkpointed, and recorded in the run folder; stopped cleanly by a signal, a time limit or a
non-finite loss. `python -m gptcore.train` parses the command line and hands a `RunPlan` here.

The loop, per iteration `it` (= optimizer steps done so far):
  1. at it % eval_interval == 0 and at the end: estimate_loss, ckpt.pt, the step's weights kept
     (every `keep_every`-th eval) — so a run always has a resumable checkpoint from step 0 on;
  2. at it % probe_interval == 0 and at the end: the probes (recorder.py);
  3. stop here if it == max_iters, max_time has passed, or SIGINT/SIGTERM came (processes agree);
  4. the batch of `it` (data.py: a function of (seed, it), the global batch), one `Trainer.step`
     per scheme, a train record each, a progress line every log_interval iterations.
Under torch.distributed every process runs the steps; rank 0 alone evaluates, probes and writes.
"""
from __future__ import annotations

import math
import signal
import sys
import time
from pathlib import Path

import torch

from gptcore.model.config import GPTConfig
from gptcore.training.config import TrainConfig
from gptcore.training.data import nanogpt_dataset
from gptcore.training.recorder import Recorder
from gptcore.training.run import RunFolder
from gptcore.training.setup import RunPlan
from gptcore.training.trace import TraceWriter
from gptcore.training.trainer import Trainer
from gptcore.training import speed

EXIT_OK, EXIT_FAILED, EXIT_SIGINT = 0, 1, 130
_STOP_CODES = {0: None, 1: "max_time", 2: "SIGTERM", 3: "SIGINT"}


class _NoWriter:
    """What ranks other than 0 write to: nothing."""

    def write(self, kind, **fields):
        return fields

    def close(self):
        pass


class TrainingRun:
    def __init__(self, plan: RunPlan, out=print):
        self.plan = plan
        self.master = plan.rank == 0
        self.say = out if self.master else (lambda *a, **k: None)
        self.folder = RunFolder(plan.out_dir)
        self.cfg = plan.train_config
        self.corpus = plan.corpus
        self._signal: str | None = None
        self._diverged = ""
        self._diverged_step = 0
        self._said_compile_failure: set[str] = set()
        self.trainers: dict[str, Trainer] = {}
        self.writer = _NoWriter()

    # -- setup -------------------------------------------------------------------------------
    def setup(self) -> None:
        plan, cfg = self.plan, self.cfg
        speed.use_tf32(plan.device)
        if plan.resume:
            for scheme in plan.schemes:
                path = self.folder.ckpt(scheme, plan.schemes)
                self.trainers[scheme] = Trainer.from_checkpoint(path, cfg, device=plan.device)
            steps = {s: t.iter_num for s, t in self.trainers.items()}
            if len(set(steps.values())) > 1:
                from gptcore.training.checkpoint import CheckpointError

                raise CheckpointError(f"the checkpoints of {plan.out_dir} are from different steps ({steps}); "
                                      f"the run was killed between two saves: start a new run")
            model_config = next(iter(self.trainers.values())).model.config
            self.corpus.check_vocab(model_config.vocab_size, _saved_vocab(self.folder.root), "the run's checkpoint")
        else:
            from gptcore.model.gpt import GPT

            for scheme in plan.schemes:
                model = GPT(plan.model_config, init=scheme, seed=cfg.seed)
                self.trainers[scheme] = Trainer(model, cfg, device=plan.device)
        self.start_step = next(iter(self.trainers.values())).iter_num
        self.block_size = next(iter(self.trainers.values())).model.config.block_size
        if self.master:
            self._open_folder()

    def _open_folder(self) -> None:
        plan = self.plan
        model_config = next(iter(self.trainers.values())).model.config
        meta = {
            "command": plan.command, "schemes": list(plan.schemes), "model_config": model_config.to_dict(),
            "train_config": self.cfg.to_dict(),
            "corpus": {"name": self.corpus.name, "description": self.corpus.description, "source": plan.corpus_source,
                       "train_tokens": len(self.corpus.train), "val_tokens": len(self.corpus.val)},
            "tokenizer": {"kind": self.corpus.tokenizer,
                          "vocab": "char_vocab.json" if self.corpus.tokenizer == "char" else None},
            "world_size": plan.world_size, "device": plan.device,
            "dtype": next(iter(self.trainers.values())).dtype,  # what "auto" became on this machine
            "autocast": None if self._choice() is None else self._choice().to_dict(),  # and why (timings)
            "probe_interval": plan.probe_interval, "preset": plan.preset,
            "max_time": plan.max_time, "checkpoints": {s: self.folder.ckpt(s, plan.schemes).name for s in plan.schemes},
        }
        continued = plan.resume and self.folder.exists()  # else a new run.json (nanoGPT's out_dir has none)
        self.meta = self.folder.start(meta, resume=continued, step=self.start_step)
        if not continued:
            self.corpus.save_vocab(self.folder.root)
        # config['dataset'] of every checkpoint; a text's nanoGPT data folder is written into the run
        self.dataset = nanogpt_dataset(self.corpus, plan.corpus_source, self.folder.root, plan.preset)
        self.writer = TraceWriter(self.folder.trace)
        self.recorder = Recorder(self.folder, self.corpus, self.block_size, self.cfg.seed)
        self.writer.write("start", run=self.meta["run"], schemes=list(plan.schemes), step=self.start_step,
                          max_iters=self.cfg.max_iters, resumed=plan.resume, world_size=plan.world_size)
        if self._choice() is not None:  # "auto" on a CPU: the timings that decided it
            self.writer.write("message", text=self._choice().describe())
            self.say(self._choice().describe())
        for text in self.plan.notes:  # train.py's settings accepted but not used here, and why
            self.writer.write("message", text=f"note: {text}")
            print(f"note: {text}", file=sys.stderr)
        for text in self.cfg.warnings():  # what nanoGPT would run too, but probably was not meant
            self.writer.write("message", text=f"warning: {text}")
            print(f"warning: {text}", file=sys.stderr)

    def _choice(self):
        """How the first scheme's trainer chose its autocast dtype (None unless "auto" was timed)."""
        return next(iter(self.trainers.values())).dtype_choice

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._loop()
        except KeyboardInterrupt:
            self.writer.write("error", step=self._step(), message="interrupted twice: stopped without saving; "
                                                                  "the checkpoint of the last eval is kept")
            raise
        except BaseException as exc:
            self.writer.write("error", step=self._step(), message=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.writer.close()

    def _on_signal(self, signum, frame) -> None:
        if self._signal == "SIGINT" and signum == signal.SIGINT:
            raise KeyboardInterrupt  # Ctrl-C twice: the user will not wait for the save
        self._signal = "SIGINT" if signum == signal.SIGINT else "SIGTERM"

    def _step(self) -> int:
        return max((t.iter_num for t in self.trainers.values()), default=0)

    def _loop(self) -> int:
        cfg, plan = self.cfg, self.plan
        rows = cfg.gradient_accumulation_steps * cfg.batch_size
        tokens = rows * self.block_size
        started = time.monotonic()
        it = self.start_step
        if it >= cfg.max_iters:
            self.say(f"{plan.out_dir} is already at step {it} of max_iters={cfg.max_iters}; "
                     f"pass a larger --max_iters to train on")
            self.writer.write("done", step=it, reason="max_iters")
            return EXIT_OK
        self.say(f"training {', '.join(plan.schemes)} from step {it} to {cfg.max_iters} on {self.corpus.description}; "
                 f"{tokens:,} tokens per step; writing {plan.out_dir}")
        if any(t.compiled for t in self.trainers.values()):
            self.say("compiling the model (torch.compile: the first step takes a minute or more; --compile=False "
                     "runs eagerly)", flush=True)
        iter_times: list[float] = []
        losses: dict[str, float | None] = {}  # each scheme's latest loss read (None: diverged)
        while True:
            stop = self._agree_stop(started, it)
            final = it >= cfg.max_iters or stop is not None
            due = final or it % cfg.eval_interval == 0 or (plan.probe_interval and it % plan.probe_interval == 0)
            if due and not self._read_steps(tokens, losses):  # the trace is whole before an eval, a probe, the end
                return self._all_diverged(self._diverged_step)
            if self.master:
                if stop in ("SIGINT", "SIGTERM"):
                    self._checkpoint(it, keep=True)
                elif not (plan.resume and it == self.start_step) or final:  # a resume starts where its save was
                    if it % cfg.eval_interval == 0 or final:
                        improved = self._evaluate(it)
                        n_eval = it // cfg.eval_interval
                        self._checkpoint(it, keep=final or n_eval % plan.keep_every == 0,
                                         improved=None if plan.always_save_checkpoint else improved)
                    if plan.probe_interval and (it % plan.probe_interval == 0 or final):
                        self._probe(it)
            if final:
                return self._finish(it, stop)
            if plan.eval_only and it == 0:  # train.py: `if iter_num == 0 and eval_only: break`
                return self._finish(it, "eval_only")
            t0 = time.perf_counter()
            x, y = self.corpus.batch("train", it, rows, self.block_size, cfg.seed)  # (rows, T) each
            for trainer in self.trainers.values():
                trainer.launch(x, y)
            it += 1
            logged = it % plan.log_interval == 0 or it == cfg.max_iters
            if (logged or self._reads_every_step()) and not self._read_steps(tokens, losses):
                return self._all_diverged(self._diverged_step)
            iter_times.append(time.perf_counter() - t0)
            if logged:
                self._progress(it, losses, iter_times[-plan.log_interval:], tokens, started)

    def _reads_every_step(self) -> bool:
        """Whether the steps' figures are read (and their train records written) every step: where
        reading costs nothing (a CPU); on CUDA at log steps, evals, probes and the end, so the host
        never waits for the GPU in between (trainer.py's launch and collect)."""
        return any(t.reads_every_step for t in self.trainers.values())

    def _read_steps(self, tokens: int, losses: dict) -> bool:
        """A train record for every step launched since the last read (one read per scheme), each
        with its own figures and the time it ended; a scheme whose step went non-finite stops here
        ("diverged"), the others go on. False when no scheme is left."""
        for scheme in list(self.trainers):
            trainer = self.trainers[scheme]
            records, error = trainer.collect()
            memory = peak_memory_mb(trainer.device) if records else None
            for r in records:
                seconds = max(r.seconds, 1e-9)
                self.writer.write("train", time=round(r.finished, 3), scheme=scheme, step=r.step, loss=r.loss,
                                  lr=r.lr, grad_norm=r.grad_norm, grad_norms=r.grad_norms,
                                  tokens_per_s=round(tokens / seconds, 1), dt=round(seconds, 5), memory_mb=memory)
                losses[scheme] = r.loss
            if trainer.compile_failure and scheme not in self._said_compile_failure:
                self._said_compile_failure.add(scheme)
                self.writer.write("message", text=f"{scheme}: {trainer.compile_failure}")
                if self.master:
                    print(f"warning: {scheme}: {trainer.compile_failure}", file=sys.stderr)
            if error is not None:
                del self.trainers[scheme]
                losses[scheme] = None
                self._diverged, self._diverged_step = str(error), error.step
                self.writer.write("diverged", scheme=scheme, step=error.step, message=str(error))
                self.say(f"{scheme}: {error}")
        return bool(self.trainers)

    def _agree_stop(self, started: float, it: int) -> str | None:
        """Why to stop now, agreed by every process (the most urgent reason any of them has). Under
        torch.distributed agreeing is a read from the device; where the steps' figures are read at
        log steps only (CUDA), so is this, and a signal or max_time takes effect at the next one."""
        code = {None: 0, "SIGTERM": 2, "SIGINT": 3}[self._signal]
        if self.master and self.plan.max_time and time.monotonic() - started >= self.plan.max_time:
            code = max(code, 1)
        if self.plan.world_size > 1:
            if not (self._reads_every_step() or it % self.plan.log_interval == 0):
                return None
            import torch.distributed as dist

            device = next(iter(self.trainers.values())).device if self.trainers else "cpu"
            flag = torch.tensor([code], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            code = int(flag.item())
        return _STOP_CODES[code]

    # -- what is measured and kept -----------------------------------------------------------------
    def _evaluate(self, it: int) -> dict[str, bool]:
        """Evaluate every scheme; {scheme: whether its val loss beat its best so far}."""
        cfg = self.cfg
        parts, improved = [], {}
        for scheme, trainer in self.trainers.items():
            best = trainer.best_val_loss
            losses = trainer.estimate_loss(
                lambda split, k: self.corpus.batch(split, k, cfg.batch_size, self.block_size, cfg.seed, stream="eval"))
            self.writer.write("eval", scheme=scheme, step=it, train=losses["train"], val=losses["val"])
            parts.append(f"{scheme} train {losses['train']:.4f} val {losses['val']:.4f}")
            improved[scheme] = losses["val"] < best
        self.say(f"step {it}: " + "; ".join(parts))
        return improved

    def _checkpoint(self, it: int, keep: bool, improved: dict | None = None) -> None:
        """ckpt.pt of every scheme (with `improved`: only of those whose val loss improved, as
        train.py with always_save_checkpoint=False), and the step's weights where `keep`."""
        for scheme, trainer in self.trainers.items():
            fields = {}
            if improved is None or improved.get(scheme):
                latest = self.folder.ckpt(scheme, self.plan.schemes)
                trainer.save(latest, corpus=self.corpus, dataset=self.dataset)
                fields["latest"] = latest.name
            if keep:
                fields["path"] = self.folder.relative(self.folder.save_step_weights(trainer.model, scheme, it))
            self.writer.write("checkpoint", scheme=scheme, step=it, **fields)

    def _probe(self, it: int) -> None:
        for scheme, trainer in self.trainers.items():
            self.writer.write("probe", **self.recorder.probe(trainer.model, scheme, it))

    def _progress(self, it: int, losses: dict, recent: list[float], tokens: int, started: float) -> None:
        per_iter = sum(recent) / len(recent)
        elapsed = time.monotonic() - started
        done = it - self.start_step
        eta = (elapsed / done) * (self.cfg.max_iters - it) if done else math.inf
        if self.plan.max_time:
            eta = min(eta, max(0.0, self.plan.max_time - elapsed))
        shown = "  ".join(f"{s} {v:.4f}" for s, v in losses.items() if v is not None)
        lr = next(iter(self.trainers.values())).last_lr if self.trainers else float("nan")
        device = next(iter(self.trainers.values())).device if self.trainers else torch.device("cpu")
        self.say(f"iter {it}/{self.cfg.max_iters}  {shown}  lr {lr:.2e}  "
                 f"{tokens * len(losses) / per_iter:,.0f} tok/s  {per_iter * 1000:.1f} ms/it  "
                 f"mem {peak_memory_mb(device):,.0f} MB  ETA {_duration(eta)}", flush=True)

    def _finish(self, it: int, stop: str | None) -> int:
        if stop in ("SIGINT", "SIGTERM"):
            self.writer.write("stopped", step=it, reason=stop)
            self.say(f"stopped by {stop} at step {it}; {self.plan.out_dir} holds its checkpoint "
                     f"(continue with --init_from=resume)")
            return EXIT_SIGINT if stop == "SIGINT" else EXIT_OK
        reason = stop or "max_iters"
        self.writer.write("done", step=it, reason=reason)
        self.say(f"done at step {it} ({reason}); checkpoints in {self.plan.out_dir}")
        return EXIT_OK

    def _all_diverged(self, it: int) -> int:
        which = "the loss" if len(self.plan.schemes) == 1 else "every scheme's loss"
        message = (f"{which} went non-finite ({self._diverged}); training stopped, and the last good checkpoint "
                   f"(the latest eval's) is kept in {self.plan.out_dir}")
        self.writer.write("error", step=it, message=message)
        print(f"error: {message}", file=sys.stderr)
        return EXIT_FAILED


def peak_memory_mb(device) -> float:
    """The most memory this process has held so far: CUDA's peak allocation on a GPU, else the peak
    resident set size (Linux reports it in KiB, macOS in bytes)."""
    device = torch.device(device)
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def _saved_vocab(folder: Path):
    from gptcore.training.data import read_saved_vocab

    return read_saved_vocab(folder)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"
