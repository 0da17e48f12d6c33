"""`python -m gptcore.bench --circuits [--quick] [--json] [--model CKPT] [--device cpu|cuda]`: transcoders
and attribution graphs (issue 38), three figures in one run.

1. a char model's transcoders: the 2-layer 128-wide char model of the SAE bench (trained here for
   --train-seconds on the pydoc corpus, or --model CKPT), `train_transcoders` at width 1024, k 16,
   2M tokens a layer on --device (where the model is put; issue 37), then `transcoder_metrics` on the
   held-out split (bars: variance unexplained <= 0.25 per layer, CE loss recovered with every MLP
   replaced >= 0.8; dead: features that never fire on the held-out text, and, beside it, on the
   training text, since a feature that fires on a few rare training contexts may miss the held-out
   ones), and one attribution graph of a held-out prompt (its size, pruned size, and the error nodes'
   share of influence);
2. the training step: `TranscoderTrainer.step` (hand-written sparse gradients) against the same
   loss through autograd with dense tensors, at the char model's shape, interleaved medians;
3. the graph at the issue's size: a 4-layer 256-wide model, width-2,048 k-16 transcoders (random
   weights: the cost depends on shapes, not values), a 64-token prompt: `attribution_graph`'s time
   and peak extra memory, against circuit-tracer's way (one autograd backward per batch of 64
   targets through the frozen model) timed on a sample of batches and scaled to every target; the
   sampled rows are checked equal to ours.

Parts 2 and 3 run on the CPU (their bars are the CPU's). --quick shrinks every part (a test runs it end to end). Timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import math
import time

import torch

from gptcore.benches.sae import json_line, model_and_corpus, windows
from gptcore.benches.sae_speed import peak_extra_bytes
from gptcore.benches.timing import machine_line, sync, timed, timed_pair
from gptcore.interp.circuits.graph import attribution_graph
from gptcore.interp.circuits.harvest import train_transcoders
from gptcore.interp.circuits.metrics import transcoder_metrics
from gptcore.interp.circuits.prune import node_influence, prune_graph
from gptcore.interp.circuits.train_step import TranscoderTrainer
from gptcore.interp.circuits.transcoder import Transcoder
from gptcore.errors import UserError
from gptcore.io.loading import resolve_device
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT

BARS = {"fvu": 0.25, "ce_loss_recovered": 0.8}


def char_transcoders(args, say) -> dict:
    model, corpus = model_and_corpus(args, say)
    device = resolve_device(args.device)
    model = model.to(device)
    train_ids, val_ids = windows(corpus.train, 64, 512 if args.quick else None), windows(corpus.val, 64)
    tokens = 65_536 if args.quick else args.tokens
    box = {}
    start = time.perf_counter()
    peak = peak_extra_bytes(lambda: box.setdefault("t", train_transcoders(
        model, train_ids, width=1024, k=16, tokens=tokens, batch=4096)), calls=1)
    sync(device)
    seconds = time.perf_counter() - start
    m = transcoder_metrics(model, box["t"], val_ids[:64] if args.quick else val_ids)
    on_train = transcoder_metrics(model, box["t"], train_ids)
    passed = all(f <= BARS["fvu"] for f in m.fvu) and m.ce_loss_recovered >= BARS["ce_loss_recovered"]
    say(f"char model transcoders on {device}, width 1024, k 16, {tokens:,} tokens a layer, both layers: "
        f"{seconds:.1f} s (reading included), peak extra host memory {peak / 2**20:.0f} MB")
    say(f"  held-out ({m.tokens:,} tokens): variance unexplained {', '.join(f'{f:.4f}' for f in m.fvu)} "
        f"(bar <= {BARS['fvu']}), L0 {', '.join(f'{v:.2f}' for v in m.l0)}, dead "
        f"{', '.join(f'{v:.1%}' for v in m.dead_fraction)} (on the {on_train.tokens:,} training tokens: "
        f"{', '.join(f'{v:.1%}' for v in on_train.dead_fraction)}); CE loss recovered with every MLP replaced "
        f"{m.ce_loss_recovered:.4f} (bar >= {BARS['ce_loss_recovered']}; clean {m.ce_clean:.3f}, replaced "
        f"{m.ce_replaced:.3f}, MLPs zeroed {m.ce_zero:.3f} nats): {'meets' if passed else 'misses'} the bars")
    out = {"char_tc_s": seconds, "char_tc_peak_mb": peak / 2**20, "char_tc_tokens": tokens, "char_device": str(device),
           "char_fvu": list(m.fvu), "char_l0": list(m.l0), "char_dead": list(m.dead_fraction),
           "char_dead_train": list(on_train.dead_fraction),
           "char_ce_clean": m.ce_clean, "char_ce_replaced": m.ce_replaced, "char_ce_zero": m.ce_zero,
           "char_ce_loss_recovered": m.ce_loss_recovered, "char_meets_bars": passed}
    out.update(char_graph(model, box["t"], val_ids[0], corpus, say))
    return out


def char_graph(model, transcoders, ids, corpus, say) -> dict:
    """One held-out prompt's graph on the char model: size, pruned size, error share of influence."""
    start = time.perf_counter()
    g = attribution_graph(model, transcoders, ids)
    seconds = time.perf_counter() - start
    influence = node_influence(g)
    nodes, edges = prune_graph(g, influence=influence)
    features, errors = float(influence[:g.n_features].sum()), float(influence[g.error_nodes].sum())
    share = errors / (features + errors) if features + errors > 0 else math.nan
    top = corpus.decode([int(g.logit_tokens[0])])
    say(f"  graph of a held-out 64-char prompt: {g.n_nodes:,} nodes ({g.n_features:,} features) in {seconds:.2f} s; "
        f"pruned to {int(nodes.sum())} nodes, {int(edges.sum())} edges; top logit {top!r} "
        f"p={float(g.logit_probs[0]):.2f}; errors carry {share:.0%} of the features' and errors' influence")
    return {"char_graph_s": seconds, "char_graph_nodes": g.n_nodes, "char_graph_kept_nodes": int(nodes.sum()),
            "char_graph_kept_edges": int(edges.sum()), "char_graph_error_share": share}


def step_speed(args, say) -> dict:
    """Our sparse step against autograd through dense tensors, same loss, same batch."""
    d, width, k, B = (32, 256, 8, 512) if args.quick else (128, 1024, 16, 4096)
    gen = torch.Generator().manual_seed(0)
    dec = torch.randn(width, d, generator=gen)
    dec /= dec.norm(dim=1, keepdim=True)
    x, y = torch.randn(B, d, generator=gen), torch.randn(B, d, generator=gen)
    ours = TranscoderTrainer(torch.randn(width, d, generator=gen), torch.zeros(width), dec, torch.zeros(d),
                             torch.zeros(d, d), k, 1e-4, dead_tokens=10**12)
    params = [p.clone().requires_grad_() for p in ours.params]
    adam = torch.optim.Adam(params, lr=1e-4)

    def autograd_step():
        E, b_enc, D, b_dec, S = params
        vals, idx = torch.addmm(b_enc, x, E.t()).topk(k, dim=1)
        recon = torch.zeros(B, width).scatter(1, idx, vals.relu()) @ D + b_dec + x @ S
        loss = (recon - y).pow(2).sum() / (y - y.mean(0)).pow(2).sum()
        adam.zero_grad()
        loss.backward()
        adam.step()

    t_ours, t_ref, _, _ = timed_pair(lambda: ours.step(x, y), autograd_step, runs=2 if args.quick else args.runs,
                                     device=torch.device("cpu"))
    say(f"training step (d {d}, width {width}, k {k}, batch {B}): hand-written sparse {t_ours * 1e3:.1f} ms, "
        f"autograd dense {t_ref * 1e3:.1f} ms ({t_ref / t_ours:.2f}x)")
    return {"step_ms": t_ours * 1e3, "step_autograd_ms": t_ref * 1e3, "step_speedup": t_ref / t_ours}


def random_transcoders(cfg: GPTConfig, width: int, k: int, seed: int = 0) -> list[Transcoder]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for layer in range(cfg.n_layer):
        t = Transcoder(cfg.n_embd, width, k, layer)
        with torch.no_grad():
            t.W_enc.copy_(torch.randn(cfg.n_embd, width, generator=gen) / cfg.n_embd ** 0.5)
            t.b_enc.fill_(0.5)  # every top-k pre-activation positive: k active features per token
            t.W_dec.copy_(0.01 * torch.randn(width, cfg.n_embd, generator=gen))
            t.W_skip.copy_(0.003 * torch.randn(cfg.n_embd, cfg.n_embd, generator=gen))
        out.append(t.requires_grad_(False))
    return out


def graph_speed(args, say) -> dict:
    if args.quick:
        cfg, width, k, T = GPTConfig(vocab_size=100, block_size=16, n_layer=2, n_head=4, n_embd=64), 256, 8, 16
    else:
        cfg, width, k, T = GPTConfig(vocab_size=100, block_size=64, n_layer=4, n_head=4, n_embd=256), 2048, 16, 64
    model = GPT(cfg, seed=0).eval().requires_grad_(False)
    transcoders = random_transcoders(cfg, width, k)
    ids = torch.randint(cfg.vocab_size, (T,), generator=torch.Generator().manual_seed(1))
    box = {}
    peak = peak_extra_bytes(lambda: box.setdefault("g", attribution_graph(model, transcoders, ids)), calls=1)
    seconds, _ = timed(lambda: attribution_graph(model, transcoders, ids), runs=1 if args.quick else 3,
                       device=torch.device("cpu"), warmup=0)
    g = box["g"]
    prune_box = {}
    prune_peak = peak_extra_bytes(lambda: prune_box.setdefault("p", prune_graph(g)), calls=1)
    prune_s, _ = timed(lambda: prune_graph(g), runs=1 if args.quick else 3, device=torch.device("cpu"), warmup=0)
    kept_nodes, kept_edges = (int(m.sum()) for m in prune_box["p"])
    batches = 1 if args.quick else 2
    ref_s, worst = autograd_rows(model, transcoders, ids, g, batches=batches, batch=64)
    n_targets = g.n_features + g.n_logits
    ref_total = ref_s / (batches * 64) * n_targets
    adjacency_mb = g.n_nodes ** 2 * 4 / 2**20
    say(f"graph at {cfg.n_layer} layers × {cfg.n_embd} wide, width {width}, k {k}, {T} tokens: {g.n_nodes:,} nodes "
        f"in {seconds:.2f} s (bar <= 10 s), peak extra memory {peak / 2**20:.0f} MB (the {adjacency_mb:.0f} MB "
        f"adjacency, the clean run, the reverse blocks)")
    say(f"  pruned (0.8, 0.98) to {kept_nodes} nodes and {kept_edges:,} edges in {prune_s:.2f} s, peak extra memory "
        f"{prune_peak / 2**20:.0f} MB")
    say(f"  one autograd backward per batch of 64 targets through the frozen model (circuit-tracer's way): "
        f"{ref_s / batches:.2f} s a batch, {ref_total:.0f} s for all {n_targets:,} targets "
        f"({ref_total / seconds:.0f}x ours); its rows equal ours to {worst:.1e} (relative)")
    return {"graph_s": seconds, "graph_nodes": g.n_nodes, "graph_peak_mb": peak / 2**20,
            "graph_adjacency_mb": adjacency_mb, "graph_autograd_s": ref_total, "graph_speedup": ref_total / seconds,
            "graph_autograd_rel_diff": worst, "prune_s": prune_s, "prune_peak_mb": prune_peak / 2**20,
            "prune_kept_nodes": kept_nodes, "prune_kept_edges": kept_edges}


def autograd_rows(model, transcoders, ids, g, *, batches: int, batch: int):
    """Seconds for `batches` backward passes of `batch` target rows each (features spread over the
    layers), and the rows' largest difference from g.adjacency relative to its largest entry."""
    cfg = model.config
    L, T, C = cfg.n_layer, len(ids), cfg.n_embd
    _, clean = model.run_with_cache(ids[None])
    sources = _source_vectors(model, transcoders, ids, g, clean)  # (N_sources, where, layer, pos, vector)
    picks = torch.linspace(0, g.n_features - 1, batches * batch).long()
    worst, seconds = 0.0, 0.0
    for b in range(batches):
        rows = picks[b * batch:(b + 1) * batch]
        start = time.perf_counter()
        add_embed = torch.zeros(batch, T, C, requires_grad=True)
        add_mlp = torch.zeros(L, batch, T, C, requires_grad=True)
        values = _frozen_forward(model, transcoders, ids, g, clean, add_embed, add_mlp, rows)  # (batch,)
        values.sum().backward()
        got = torch.zeros(batch, g.n_nodes)
        for col, (where, layer, pos, vector) in enumerate(sources):
            grad = add_embed.grad[:, pos] if where == "embed" else add_mlp.grad[layer, :, pos]
            got[:, col] = grad @ vector
        seconds += time.perf_counter() - start
        scale = float(g.adjacency.abs().max())
        worst = max(worst, float((got - g.adjacency[rows]).abs().max()) / scale)
    return seconds, worst


def _source_vectors(model, transcoders, ids, g, clean):
    out = [("mlp", layer, pos, g.activations[i] * transcoders[layer].W_dec[f])
           for i, (layer, pos, f) in enumerate(g.features.tolist())]
    for layer, t in enumerate(transcoders):
        x, y = clean[f"blocks.{layer}.ln2.hook_normalized"][0], clean[f"blocks.{layer}.hook_mlp_out"][0]
        error = y - t.decode(t.encode(x), x)
        out += [("mlp", layer, pos, error[pos]) for pos in range(len(ids))]
    return out + [("embed", -1, pos, model.embed.weight[ids[pos]]) for pos in range(len(ids))]


def _frozen_forward(model, transcoders, ids, g, clean, add_embed, add_mlp, rows):
    """Each batch row's target (a feature's pre-activation) in the frozen model with that row's additions."""
    B = add_embed.shape[0]
    seen = {}

    def norm(module, x_clean):
        inv = (x_clean.var(-1, unbiased=False, keepdim=True) + module.eps).rsqrt().detach()
        bias = module.bias if module.bias is not None else 0
        return lambda x: (x - x.mean(-1, keepdim=True)) * inv * module.weight + bias

    hooks = [("hook_embed", lambda x, _hp: x + add_embed)]
    for layer, block in enumerate(model.blocks):
        t = transcoders[layer]
        n1 = norm(block.ln1, clean[f"blocks.{layer}.hook_resid_pre"])
        n2 = norm(block.ln2, clean[f"blocks.{layer}.hook_resid_mid"])
        frozen = clean[f"blocks.{layer}.hook_mlp_out"] - t.skip_term(clean[f"blocks.{layer}.ln2.hook_normalized"])
        hooks += [(f"blocks.{layer}.hook_resid_pre", lambda x, _hp, l=layer: seen.__setitem__(("pre", l), x)),
                  (f"blocks.{layer}.ln1.hook_normalized", lambda x, _hp, n=n1, l=layer: n(seen[("pre", l)])),
                  (f"blocks.{layer}.attn.hook_pattern",
                   lambda x, _hp, p=clean[f"blocks.{layer}.attn.hook_pattern"]: p.expand_as(x)),
                  (f"blocks.{layer}.hook_resid_mid", lambda x, _hp, l=layer: seen.__setitem__(("mid", l), x)),
                  (f"blocks.{layer}.ln2.hook_normalized",
                   lambda x, _hp, n=n2, l=layer: seen.setdefault(("in", l), n(seen[("mid", l)]))),
                  (f"blocks.{layer}.hook_mlp_out",
                   lambda x, _hp, t=t, fz=frozen, l=layer: t.skip_term(seen[("in", l)]) + fz + add_mlp[l])]
    with model.hooks(hooks):
        model(ids[None].expand(B, len(ids)), logits=None)
    layer_, pos_, feat_ = g.features[rows].T
    out = []
    for b in range(B):
        layer, pos, f = int(layer_[b]), int(pos_[b]), int(feat_[b])
        t = transcoders[layer]
        out.append(seen[("in", layer)][b, pos] @ t.W_enc[:, f])
    return torch.stack(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcore.bench --circuits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--circuits", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small sizes everywhere (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--model", help="a char model checkpoint to use instead of training one")
    parser.add_argument("--train-seconds", type=float, default=60.0, help="char model training time (default 60)")
    parser.add_argument("--tokens", type=int, default=2_000_000, help="transcoder training tokens a layer (default 2M)")
    parser.add_argument("--runs", type=int, default=5, help="timed training steps per side (default 5)")
    parser.add_argument("--skip-char", action="store_true", help="leave out part 1 (the char model)")
    parser.add_argument("--device", default="cpu", help="where part 1's model runs and its transcoders train: cpu "
                                                        "(default) or cuda[:N]")
    args = parser.parse_args(argv)
    try:
        args.device = str(resolve_device(args.device))  # a device this machine lacks: said before any work
    except UserError as exc:
        print(f"python -m gptcore.bench --circuits: {exc}")
        return 2
    if args.quick:
        args.train_seconds = min(args.train_seconds, 3.0)
    say = (lambda line: None) if args.json else (lambda line: print(line, flush=True))
    say(machine_line())
    out = {"quick": args.quick}
    out.update(graph_speed(args, say))
    out.update(step_speed(args, say))
    if not args.skip_char:
        out.update(char_transcoders(args, say))
    if args.json:
        print(json_line(out))
    return 0
