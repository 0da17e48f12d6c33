"""`python -m gptcore count|info|generate`: the explorer's facts without the GUI."""
from __future__ import annotations

import argparse
import codecs
import sys

from gptcore.model.config import MLPS, NORMS, POS_EMBEDDINGS, PRESETS, ConfigError, GPTConfig, describe_parts
from gptcore.model.params import breakdown_table, count_parameters, format_bytes, format_count, modern_differences

META_HELP = ("nanoGPT's meta.pkl for a char-level ckpt.pt whose data/<dataset>/meta.pkl is not found "
             "(read without running it)")
CONFIG_FLAGS = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "mlp_ratio")
# The modern parts: (flag type, choices); printed only when one differs from GPT-2's.
MODERN_FLAGS = {"pos_embedding": (str, POS_EMBEDDINGS), "rope_theta": (float, None), "norm": (str, NORMS),
                "mlp": (str, MLPS), "mlp_hidden": (int, None), "n_kv_head": (int, None)}


def _add_count(sub) -> None:
    p = sub.add_parser("count", help="parameter breakdown of a config (no model is built)")
    p.add_argument("--preset", default="gpt2", choices=sorted(PRESETS), help="starting shape (default gpt2)")
    p.add_argument("--untied", action="store_true", help="separate output head instead of sharing the embedding")
    p.add_argument("--no-bias", action="store_true", help="no biases in Linear and LayerNorm layers")
    for name in CONFIG_FLAGS:
        kind = float if name == "mlp_ratio" else int
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, help=f"override {name}")
    for name, (kind, choices) in MODERN_FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, choices=choices,
                       help=f"{name} (GPT-2: {getattr(GPTConfig(), name)})")
    p.set_defaults(func=cmd_count)


def _modern_lines(cfg: GPTConfig) -> list[str]:
    """The parts and what each modern one changes in the count; nothing for a GPT-2 config."""
    differences = modern_differences(cfg)
    if not differences:
        return []
    return [f"parts: {describe_parts(cfg)}", *(f"  {line}" for line in differences)]


def cmd_count(args) -> int:
    overrides = {k: getattr(args, k) for k in (*CONFIG_FLAGS, *MODERN_FLAGS) if getattr(args, k) is not None}
    if args.untied:
        overrides["tie_weights"] = False
    if args.no_bias:
        overrides["bias"] = False
    cfg = GPTConfig.preset(args.preset, **overrides)
    count = count_parameters(cfg)
    shape = ", ".join(f"{k}={getattr(cfg, k)}" for k in CONFIG_FLAGS)
    modern = ", ".join(f"{k}={getattr(cfg, k)}" for k in MODERN_FLAGS if getattr(cfg, k) != getattr(GPTConfig(), k))
    print(f"config: {shape}, bias={cfg.bias}, tie_weights={cfg.tie_weights}{', ' + modern if modern else ''}")
    for line in _modern_lines(cfg):
        print(line)
    print()
    print(breakdown_table(count))
    print()
    print(f"tied total    {count.tied_total:>16,}  ({format_count(count.tied_total)})")
    print(f"untied total  {count.untied_total:>16,}  ({format_count(count.untied_total)})")
    print(f"difference    {count.tie_saving:>16,}  (vocab_size × n_embd, the output head)")
    print(f"non-embedding {count.non_embedding:>16,}  (nanoGPT: total minus the position table)")
    print(f"weights fp32 {format_bytes(count.memory_bytes('fp32'))}, bf16 {format_bytes(count.memory_bytes('bf16'))}; "
          f"Adam training fp32 (weights+grads+2 moments) {format_bytes(count.training_bytes('fp32'))}")
    return 0


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="load a checkpoint and describe it")
    p.add_argument("source", help="hub id (gpt2, gpt2-medium, …), HF folder (GPT-2, Llama, Qwen2), .safetensors "
                                  "file or nanoGPT ckpt.pt")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    p.add_argument("--dtype", default=None, help="fp32 (default), bf16 or fp16")
    p.add_argument("--n-head", type=int, default=None,
                   help="head count of a file that does not record it (the book's model.pth, a lone .safetensors "
                        "or state dict): no tensor shape holds it, so such a file is refused without it")
    p.add_argument("--meta", default=None, help=META_HELP)
    p.set_defaults(func=cmd_info)


def cmd_info(args) -> int:
    from gptcore.io.loading import load

    _, info = load(args.source, device=args.device, dtype=args.dtype, n_head=args.n_head, meta=args.meta,
                   progress=_print_progress)
    for key, value in info.describe().items():
        print(f"{key:<14}{value}")
    print()
    print(breakdown_table(count_parameters(info.config)))
    for line in _modern_lines(info.config):
        print(line)
    return 0


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="stream text from a model")
    p.add_argument("--model", default="gpt2", help="anything `info` takes (default gpt2)")
    p.add_argument("--prompt", default="", help="text to continue (empty: start from <|endoftext|>)")
    p.add_argument("--max-new-tokens", type=int, default=50)
    p.add_argument("--temperature", type=float, default=1.0, help="0 is greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--n-head", type=int, default=None, help="head count of a file that does not record it")
    p.add_argument("--meta", default=None, help=META_HELP)
    p.set_defaults(func=cmd_generate)


def cmd_generate(args) -> int:
    from gptcore.generation.streaming import check_settings, generate
    from gptcore.io.folder_tokenizer import IdTokenizer
    from gptcore.io.loading import load, load_tokenizer

    # Settings are checked before anything slow happens (a bad --top-p fails at once).
    check_settings(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                   repetition_penalty=args.repetition_penalty, max_new_tokens=args.max_new_tokens)
    model, info = load(args.model, device=args.device, n_head=args.n_head, meta=args.meta, progress=_print_progress)
    tok, reason = load_tokenizer(info)  # the model's own: GPT-2's BPE, its folder's, its characters
    if tok is None:
        tok = IdTokenizer(model.config.vocab_size, reason)  # the prompt is ids, the output too
    start = tok.encode(args.prompt) or ([tok.eot_token] if tok.eot_token is not None else [])
    if not start:
        raise ValueError(f"{info.name}'s vocabulary has no end-of-text token to start from; give --prompt")
    print(f"[{info.name} on {info.device}, tokenizer {info.tokenizer.describe()}]", file=sys.stderr)
    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span tokens
    for step in generate(model, start, max_new_tokens=args.max_new_tokens,
                         temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                         repetition_penalty=args.repetition_penalty, seed=args.seed):
        sys.stdout.write(decoder.decode(tok.token_bytes(step.token)))
        sys.stdout.flush()
    sys.stdout.write(decoder.decode(b"", final=True) + "\n")
    return 0


def _print_progress(done: int, total: int, what: str = "") -> None:
    if total:
        print(f"\r{what} {100 * done / total:5.1f}%", end="", file=sys.stderr, flush=True)
        if done >= total:
            print(file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcore", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_count(sub)
    _add_info(sub)
    _add_generate(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, ValueError, OSError, RuntimeError) as exc:  # LoadError, TokenizerError too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
