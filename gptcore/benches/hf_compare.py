"""`python -m gptcore.bench [--json] [--quick]`: how fast we are, next to HF transformers.

One run, the same random GPT-2-small weights and the same prompts on both sides:

- forward_capture: a 64-token forward capturing every attention pattern and the residual
  stream at every layer. Ours skips the head (the explorer needs no logits to draw
  attention) and materialises patterns only because they are asked for; HF runs eager
  attention with output_attentions + output_hidden_states. Target ratio <= 0.6.
- decode: greedy tokens/s for 128 new tokens with a KV cache, our streaming `generate`
  (which also reports each step's probability and alternatives) vs HF `generate`.
  Target ratio (ours / HF tokens per second) >= 1.1 on a CPU (issue 28), >= 5 and >= 1,000 tok/s
  on CUDA (issue 37); also as achieved GB/s and as a fraction of the floor this machine's measured
  bandwidth sets (benches/hardware.py); the first token's time (CUDA graph capture) and the app's
  streamed path beside it (benches/decode.py). `--decode` runs only these.
- information_flow: the routes (issue 29) at 32 tokens vs one HF forward with output_attentions
  on the same ids; see benches/flow.py. Target ratio <= 3.
- load: our `load(folder)` vs `GPT2LMHeadModel.from_pretrained(folder)` on a GPT-2-small
  folder written here with `save_pretrained`. Target ratio <= 1.0.
- recount: `count_parameters` on gpt2-xl (config built and validated too), in ms,
  next to HF's way of counting (build on the meta device, sum numel). Target <= 5 ms.
- patch_heads: activation patching of every head (GPT-2 small: 144) on a 15-token prompt,
  batched `patch_heads` vs one hooked forward per head; see benches/patching.py. Target ratio
  <= 0.3 and patch_heads_s <= 5 s. `--tl-python PATH` also runs `gptcore.benches.tl_check` (DLA,
  patching and census against TransformerLens 4.x) in that interpreter.
- smollm2_load, smollm2_decode: the same load and decode comparisons on a SmolLM2-135M-shaped
  Llama (rotary, RMSNorm, SwiGLU, grouped-query); see benches/smollm2.py.

Each figure is the median of several runs after a warm-up, our runs and HF's
interleaved so that other load on the machine falls on both sides alike. `--quick` uses a tiny model so
a test can check that the bench runs; its timings mean nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable

import torch

from gptcore.model.config import GPTConfig
from gptcore.model.params import count_parameters
from gptcore.benches import flow as bench_flow
from gptcore.benches import bf16 as bench_bf16
from gptcore.benches import decode as bench_decode_mod
from gptcore.benches.decode import bench_decode
from gptcore.benches import hardware
from gptcore.benches import patching as bench_patching
from gptcore.benches import smollm2 as bench_smollm2
from gptcore.benches.patching import TARGETS as PATCHING_TARGETS
from gptcore.benches.smollm2 import TARGETS as SMOLLM2_TARGETS
from gptcore.benches.timing import cpu_name, ops_launched, timed, timed_pair

GPT2_SMALL = dict(vocab_size=50257, n_positions=1024, n_layer=12, n_head=12, n_embd=768)
TINY = dict(vocab_size=1000, n_positions=128, n_layer=2, n_head=4, n_embd=64)
TARGETS = {"forward_capture": ("<=", 0.6), "load": ("<=", 1.0), "recount": ("<=", 5.0),
           **bench_decode_mod.TARGETS, **PATCHING_TARGETS, **SMOLLM2_TARGETS, **bench_flow.TARGETS}


@dataclass(frozen=True)
class Plan:
    shape: dict
    capture_tokens: int
    prompt_tokens: int
    new_tokens: int
    runs: int
    decode_runs: int
    patch_tokens: int = 15
    patch_runs: int = 3  # the naive side is 144 forwards: a few runs are enough


FULL = Plan(GPT2_SMALL, capture_tokens=64, prompt_tokens=16, new_tokens=128, runs=9, decode_runs=5)
QUICK = Plan(TINY, capture_tokens=16, prompt_tokens=4, new_tokens=8, runs=2, decode_runs=1, patch_tokens=6, patch_runs=1)


def _hf_pair(shape: dict, device: torch.device):
    """HF GPT2LMHeadModel with random weights (seeded) and our GPT holding the same ones."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from gptcore.io.convert import from_hf_state_dict

    hf_config = GPT2Config(**shape, bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(hf_config).eval()
    ours = from_hf_state_dict({k: v.clone() for k, v in hf.state_dict().items()}, hf_config=hf_config).eval()
    return hf_config, hf.to(device), ours.to(device)


def _capture_filter(n_layer: int) -> Callable[[str], bool]:
    """Every attention pattern, and the residual stream entering each block plus the
    final block's output: the same L+1 states HF's output_hidden_states returns."""
    last = f"blocks.{n_layer - 1}.hook_resid_post"
    return lambda name: name.endswith("attn.hook_pattern") or name.endswith("hook_resid_pre") or name == last


def bench_forward_capture(hf, ours, ids: torch.Tensor, plan: Plan, device) -> dict:
    keep = _capture_filter(ours.config.n_layer)

    def run_ours():
        with torch.inference_mode():
            return ours.run_with_cache(ids, names_filter=keep, logits=None)

    def run_ref():
        with torch.inference_mode():
            return hf(ids, output_attentions=True, output_hidden_states=True)

    # Same computation? Our patterns against HF's attentions, before timing anything.
    (_, cache), out = run_ours(), run_ref()
    diff = max(float((cache[f"blocks.{i}.attn.hook_pattern"] - a).abs().max()) for i, a in enumerate(out.attentions))
    n_captured = len(cache)
    del cache, out
    ours_s, ref_s, ours_all, ref_all = timed_pair(run_ours, run_ref, plan.runs, device)
    return dict(forward_capture_ms_ours=1e3 * ours_s, forward_capture_ms_ref=1e3 * ref_s,
                forward_capture_ratio=ours_s / ref_s, forward_capture_pattern_max_abs_diff=diff,
                forward_capture_tensors=n_captured, forward_capture_ops_ours=ops_launched(run_ours),
                forward_capture_ops_ref=ops_launched(run_ref),
                forward_capture_samples_ms_ours=[1e3 * s for s in ours_all],
                forward_capture_samples_ms_ref=[1e3 * s for s in ref_all])


def bench_load(hf, plan: Plan, device) -> dict:
    from transformers import GPT2LMHeadModel

    from gptcore.io.loading import load

    with tempfile.TemporaryDirectory(prefix="gptcore-bench-") as folder:
        hf.to("cpu").save_pretrained(folder)
        hf.to(device)

        def run_ours():
            return load(folder, device=str(device))

        def run_ref():
            return GPT2LMHeadModel.from_pretrained(folder).to(device)

        ours_s, ref_s, ours_all, ref_all = timed_pair(run_ours, run_ref, plan.runs, device)
    return dict(load_s_ours=ours_s, load_s_ref=ref_s, load_ratio=ours_s / ref_s,
                load_samples_s_ours=ours_all, load_samples_s_ref=ref_all)


def bench_recount(plan: Plan) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel

    def run_ours():
        return count_parameters(GPTConfig.preset("gpt2-xl")).total

    def run_ref():
        with torch.device("meta"):
            model = GPT2LMHeadModel(GPT2Config(n_layer=48, n_head=25, n_embd=1600))
        return model.num_parameters()

    cpu = torch.device("cpu")
    ours_s, _ = timed(run_ours, 50, cpu)
    ref_s, _ = timed(run_ref, max(1, plan.runs // 2), cpu)
    return dict(recount_ms=1e3 * ours_s, recount_ms_ref=1e3 * ref_s, recount_ratio=ours_s / ref_s,
                recount_total_ours=run_ours(), recount_total_ref=run_ref())


def run_bench(quick: bool = False, device: torch.device | None = None, progress=None, tl_python: str | None = None,
              decode_only: bool = False) -> dict:
    """Every measurement (`decode_only`: the decode lines alone) -> one flat dict of figures (what --json prints)."""
    import transformers
    import transformers.utils.logging

    from gptcore.io.loading import default_device

    transformers.utils.logging.disable_progress_bar()  # its bars would interleave with ours
    plan = QUICK if quick else FULL
    device = torch.device(device) if device is not None else default_device()
    say = progress or (lambda message: None)
    result = dict(device=str(device), cpu=cpu_name(), torch_threads=torch.get_num_threads(), torch_version=torch.__version__,
                  transformers_version=transformers.__version__, quick=quick, shape=dict(plan.shape),
                  runs=plan.runs, decode_runs=plan.decode_runs, warmup=1, **hardware.cpu_features())
    say(f"building {'a tiny model' if quick else 'GPT-2 small'} (random weights) on {device}")
    _, hf, ours = _hf_pair(plan.shape, device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, plan.shape["vocab_size"], (1, plan.capture_tokens), generator=g).to(device)  # (1, T)
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    if decode_only:
        _decode_lines(result, hf, ours, ids[:, :plan.prompt_tokens], plan, device, quick, say)
        result.pop("tokens_ours")
        return result
    say("forward_capture")
    result.update(bench_forward_capture(hf, ours, ids, plan, device))
    say("information_flow (routes)")
    result.update(bench_flow.bench_flow(hf, ours, ids, plan.runs, device, timed_pair))
    say("patch_heads (the naive loop takes a while)")
    result.update(bench_patching.bench_patch_heads(ours, plan.shape, plan.patch_tokens, plan.patch_runs, device,
                                                   timed_pair))
    _decode_lines(result, hf, ours, ids[:, :plan.prompt_tokens], plan, device, quick, say)
    say("bf16: agreement with fp32, and decode against transformers' fp32")
    result.update(bench_bf16.bench_bf16(hf, ours, ids, ids[:, :plan.prompt_tokens], plan, device, bench_decode,
                                        fp32_tokens=result.pop("tokens_ours")))
    result.update(hardware.decode_vs_floor("bf16_decode", result.pop("_bf16_model"), result["bf16_decode_tok_s_ours"],
                                           result["bandwidth_gemv_gb_s"]))
    del ours
    say("load")
    result.update(bench_load(hf, plan, device))
    del hf
    say("recount")
    result.update(bench_recount(plan))
    result.update(bench_smollm2.bench_smollm2(quick, device, timed_pair, say))
    if tl_python:
        say("TransformerLens check")
        result.update(bench_patching.run_tl_check(tl_python, quick))
    return result


def _decode_lines(result: dict, hf, ours, prompt: torch.Tensor, plan: Plan, device, quick: bool, say) -> dict:
    """The decode figures into `result`: the first token (cold, then warm), ours vs HF, against the
    bandwidth floor, and the app's streamed path (benches/decode.py)."""
    say("decode: the first token (CUDA graphs captured on CUDA), then ours vs HF generate")
    result.update(bench_decode_mod.first_token(ours, prompt, device))
    result.update(bench_decode(hf, ours, prompt, plan, device))
    say("memory bandwidth (copy, gemv) and decode against its floor")
    result.update(hardware.measure_bandwidth(device, **({} if not quick else hardware.QUICK_SIZES)))
    result.update(hardware.decode_vs_floor("decode", ours, result["decode_tok_s_ours"], result["bandwidth_gemv_gb_s"]))
    say("the app's streamed generation (explorer session, no Qt) in a child process")
    result.update(bench_decode_mod.app_stream(device, quick))
    return result


def _meets(name: str, value: float) -> bool:
    op, target = TARGETS[name]
    return value <= target if op == "<=" else value >= target


def _ops_note(r: dict, name: str) -> str:
    """"; operators run … N vs HF's M" when the figures hold the counts (benches/timing.ops_launched)."""
    if f"{name}_ops_ours" not in r:
        return ""
    return f"; operators run (kernel launches on a GPU) {r[f'{name}_ops_ours']} vs HF's {r[f'{name}_ops_ref']}"


def format_table(r: dict) -> str:
    """The figures as a table (rows with their targets) and notes; `--decode` runs have the decode lines only."""
    rows = []
    if "forward_capture_ratio" in r:
        rows.append(("forward_capture", f"{r['forward_capture_ms_ours']:.1f} ms", f"{r['forward_capture_ms_ref']:.1f} ms",
                     r["forward_capture_ratio"], r["forward_capture_ratio"]))
    rows += bench_decode_mod.table_rows(r)
    if "load_ratio" in r:
        rows.append(("load", f"{r['load_s_ours']:.3f} s", f"{r['load_s_ref']:.3f} s", r["load_ratio"], r["load_ratio"]))
    if "recount_ms" in r:
        rows.append(("recount", f"{r['recount_ms']:.3f} ms", f"{r['recount_ms_ref']:.1f} ms", r["recount_ratio"],
                     r["recount_ms"]))
    if "smollm2_load_ratio" in r:
        rows += bench_smollm2.table_rows(r)
    shape = r["shape"]
    lines = [
        f"{'tiny model (--quick: timings mean nothing)' if r['quick'] else 'GPT-2 small shape'}: "
        f"{shape['n_layer']} layers, width {shape['n_embd']}, vocab {shape['vocab_size']}; random weights",
        f"device {r['device']} ({r.get('gpu') or r.get('cpu', 'CPU not recorded')}), {r['torch_threads']} torch threads, "
        f"torch {r['torch_version']}, transformers {r['transformers_version']}; median of {r['runs']} runs "
        f"({r['decode_runs']} for decode), ours and HF interleaved, after 1 warm-up",
        hardware.flags_line(r),
        "",
        f"{'name':<18}{'ours':>14}{'reference':>14}{'ratio':>9}   target",
    ]
    if "patch_heads_s" in r:
        rows += bench_patching.table_rows(r)
    if "flow_ratio" in r:
        rows += bench_flow.table_rows(r)
    for name, ours, ref, ratio, judged in rows:
        op, target = TARGETS[name]
        unit = " ms" if name == "recount" else " tok/s" if name.endswith("tok_s") else ""
        verdict = "met" if _meets(name, judged) else "MISSED"
        lines.append(f"{name:<18}{ours:>14}{ref:>14}{ratio:>9.3f}   {op} {target:g}{unit}  {verdict}")
    lines.append("")
    if "forward_capture_tensors" in r:
        lines.append(f"forward_capture: {r['forward_capture_tensors']} tensors captured; patterns match HF's to "
                     f"{r['forward_capture_pattern_max_abs_diff']:.1e}" + _ops_note(r, "forward_capture"))
    lines += bench_decode_mod.table_notes(r)
    if "recount_total_ours" in r:
        lines.append(f"recount: reference = build GPT2LMHeadModel(gpt2-xl) on the meta device and sum numel; "
                     f"totals {r['recount_total_ours']:,} vs {r['recount_total_ref']:,}")
    lines += hardware.table_notes(r)
    lines += bench_bf16.table_notes(r)
    lines += bench_patching.table_notes(r)
    if "flow_ratio" in r:
        lines += bench_flow.table_notes(r)
    if "smollm2_load_ratio" in r:
        lines += bench_smollm2.table_notes(r)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcore.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true", help="tiny model, few runs: checks the bench runs")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads for both sides (default: torch's choice; on a busy machine 1 is steadier)")
    parser.add_argument("--decode", action="store_true",
                        help="only the decode lines: ours vs HF generate, the first token (CUDA graph capture), the app's stream")
    parser.add_argument("--tl-python", default=None, metavar="PATH",
                        help="also compare DLA and patching with TransformerLens, run by this Python (one that has transformer-lens)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be 1 or more")
        torch.set_num_threads(args.threads)
    progress = None if args.json else (lambda message: print(f"… {message}", file=sys.stderr, flush=True))
    result = run_bench(quick=args.quick, device=args.device, progress=progress, tl_python=args.tl_python,
                       decode_only=args.decode)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
