"""The Llama-family part of `gptcore.bench`: a SmolLM2-135M-shaped `LlamaForCausalLM` (30 layers,
width 576, 9 query / 3 key-value heads, SwiGLU 1,536, vocabulary 49,152, tied, rotary base 100,000)
with random weights, saved by transformers, then on both sides, interleaved:

- smollm2_load: our `load(folder)` vs `LlamaForCausalLM.from_pretrained(folder)`. Target <= 1.0.
- smollm2_decode: greedy tokens/s with a KV cache, our streaming `generate` vs HF `generate` on the
  model from_pretrained gave (its default attention). Target (ours / HF tokens per second) >= 1.0.

Before timing, the two are checked to compute the same thing: logits of one prompt (max abs
difference reported) and the greedy tokens themselves.
"""
from __future__ import annotations

import tempfile

import torch

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
TINY_LLAMA = dict(vocab_size=1000, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
TARGETS = {"smollm2_load": ("<=", 1.0), "smollm2_decode": (">=", 1.0)}


def bench_smollm2(quick: bool, device: torch.device, timed_pair, say=lambda message: None) -> dict:
    """All smollm2_* figures (a flat dict). `timed_pair` is timing.timed_pair (interleaved medians)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from gptcore.benches.timing import greedy_decode_pair
    from gptcore.io.loading import load

    shape = TINY_LLAMA if quick else SMOLLM2_135M
    load_runs, decode_runs = (2, 1) if quick else (7, 3)
    prompt_tokens, new_tokens = (4, 8) if quick else (16, 64)
    out = dict(smollm2_shape=dict(shape), smollm2_load_runs=load_runs, smollm2_decode_runs=decode_runs)
    say("smollm2: building a SmolLM2-135M-shaped Llama (random weights)" if not quick else "smollm2: tiny Llama")
    with tempfile.TemporaryDirectory(prefix="gptcore-bench-smollm2-") as folder:
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**shape, bos_token_id=0, eos_token_id=0)).save_pretrained(folder)

        say("smollm2: load")
        ours_s, ref_s, ours_all, ref_all = timed_pair(
            lambda: load(folder, device=str(device)),
            lambda: LlamaForCausalLM.from_pretrained(folder).to(device), load_runs, device)
        out.update(smollm2_load_s_ours=ours_s, smollm2_load_s_ref=ref_s, smollm2_load_ratio=ours_s / ref_s,
                   smollm2_load_samples_s_ours=ours_all, smollm2_load_samples_s_ref=ref_all)

        ours, info = load(folder, device=str(device))
        hf = LlamaForCausalLM.from_pretrained(folder).to(device).eval()
    out.update(smollm2_params=info.n_params, smollm2_params_ref=hf.num_parameters())
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, shape["vocab_size"], (1, prompt_tokens), generator=g).to(device)  # (1, T)
    with torch.inference_mode():
        diff = float((ours(prompt) - hf(prompt).logits).abs().max())
    out.update(smollm2_logits_max_abs_diff=diff)

    say("smollm2: decode")
    hf.generation_config.eos_token_id = None
    run_ours, run_ref, produced = greedy_decode_pair(ours, hf, prompt, new_tokens)

    ours_s, ref_s, ours_all, ref_all = timed_pair(run_ours, run_ref, decode_runs, device)
    out.update(smollm2_decode_tok_s_ours=new_tokens / ours_s, smollm2_decode_tok_s_ref=new_tokens / ref_s,
               smollm2_decode_ratio=ref_s / ours_s, smollm2_decode_same_tokens=produced["ours"] == produced["ref"],
               smollm2_decode_new_tokens=new_tokens, smollm2_decode_prompt_tokens=prompt_tokens,
               smollm2_attn_implementation_ref=str(hf.config._attn_implementation),
               smollm2_decode_samples_s_ours=ours_all, smollm2_decode_samples_s_ref=ref_all)
    return out


def table_rows(r: dict) -> list[tuple]:
    """(name, ours, reference, ratio, judged value) rows for hf_compare.format_table."""
    return [
        ("smollm2_load", f"{r['smollm2_load_s_ours']:.3f} s", f"{r['smollm2_load_s_ref']:.3f} s",
         r["smollm2_load_ratio"], r["smollm2_load_ratio"]),
        ("smollm2_decode", f"{r['smollm2_decode_tok_s_ours']:.1f} tok/s", f"{r['smollm2_decode_tok_s_ref']:.1f} tok/s",
         r["smollm2_decode_ratio"], r["smollm2_decode_ratio"]),
    ]


def table_notes(r: dict) -> list[str]:
    s = r["smollm2_shape"]
    return [
        f"smollm2: LlamaForCausalLM {s['num_hidden_layers']} layers, width {s['hidden_size']}, "
        f"{s['num_attention_heads']}/{s['num_key_value_heads']} heads, MLP {s['intermediate_size']}, vocab "
        f"{s['vocab_size']}, tied; {r['smollm2_params']:,} parameters (HF: {r['smollm2_params_ref']:,}); "
        f"logits match HF's to {r['smollm2_logits_max_abs_diff']:.1e}; {r['smollm2_decode_new_tokens']} greedy "
        f"tokens identical to HF's ({r['smollm2_attn_implementation_ref']}): {r['smollm2_decode_same_tokens']}",
    ]
