"""Attribution graphs (issue 38): every edge against the definition, computed here by brute force.

The oracle builds the frozen replacement model explicitly with hooks on the model itself: attention
patterns replaced by the clean run's, every norm recomputed with the clean run's scale, each MLP's
output replaced by its transcoder's skip term of the (frozen-norm) input plus the clean run's
remainder (features, b_dec, error: frozen). It then adds each source's vector at its position,
one source per batch row, and reads every target: a feature's pre-activation, the last position's
logit minus the mean logit. adjacency[:, source] must be the change."""
import pytest
import torch

from gptcore import (AttributionGraph, CircuitError, GPTConfig, PromptTooLong, Transcoder, TranscodersDoNotFit,
                     UnsupportedModel, attribution_graph)
from gptcore.errors import UserError
from gptcore.interp.circuits import graph as graph_module
from gptcore.model.gpt import GPT

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GPT2_LIKE = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=4, n_embd=32)
LLAMA_LIKE = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=4, n_kv_head=2, n_embd=32, norm="rmsnorm",
                       mlp="swiglu", pos_embedding="rope", bias=False)


def random_transcoders(cfg, width=24, k=3, skip=True, seed=0, b_dec=True, frozen=True):
    """Random transcoders at a random GPT's scale (its stream is ~0.1 wide, an MLP's output ~0.02): a
    skip much larger than that would make the frozen model amplify rounding ~40x per layer."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for layer in range(cfg.n_layer):
        t = Transcoder(cfg.n_embd, width, k, layer, skip=skip)
        with torch.no_grad():
            t.W_enc.copy_(torch.randn(cfg.n_embd, width, generator=gen) / cfg.n_embd ** 0.5)
            t.b_enc.copy_(0.3 * torch.randn(width, generator=gen))
            t.W_dec.copy_(0.01 * torch.randn(width, cfg.n_embd, generator=gen))
            if b_dec:
                t.b_dec.copy_(0.01 * torch.randn(cfg.n_embd, generator=gen))
            if skip:
                t.W_skip.copy_(0.003 * torch.randn(cfg.n_embd, cfg.n_embd, generator=gen))
        out.append(t.requires_grad_(not frozen))
    return out


def frozen_oracle(model, transcoders, ids, graph):
    """(adjacency (N, N), target values with nothing added (N,), last logits with nothing added)."""
    cfg = model.config
    L, T, C = cfg.n_layer, len(ids), cfg.n_embd
    _, clean = model.run_with_cache(ids[None])

    def frozen_norm(module, x_clean):
        if cfg.norm == "rmsnorm":
            sigma = (x_clean.pow(2).mean(-1, keepdim=True) + module.eps).sqrt()
            return lambda x: x / sigma * module.weight
        sigma = (x_clean.var(-1, unbiased=False, keepdim=True) + module.eps).sqrt()
        bias = module.bias if module.bias is not None else 0
        return lambda x: (x - x.mean(-1, keepdim=True)) / sigma * module.weight + bias

    sources = []  # in node order: features, errors (layer-major), tokens
    for i, (layer, pos, f) in enumerate(graph.features.tolist()):
        sources.append(("mlp", layer, pos, graph.activations[i] * transcoders[layer].W_dec[f]))
    for layer, t in enumerate(transcoders):
        x, y = clean[f"blocks.{layer}.ln2.hook_normalized"][0], clean[f"blocks.{layer}.hook_mlp_out"][0]
        error = y - t.decode(t.encode(x), x)
        sources += [("mlp", layer, pos, error[pos]) for pos in range(T)]
    sources += [("embed", -1, pos, model.embed.weight[ids[pos]]) for pos in range(T)]
    B = len(sources) + 1  # the last row adds nothing
    add_embed, add_mlp = torch.zeros(B, T, C), torch.zeros(L, B, T, C)
    for b, (where, layer, pos, vector) in enumerate(sources):
        (add_embed[b] if where == "embed" else add_mlp[layer, b])[pos] += vector
    seen = {}

    def keep(key):
        return lambda x, _hp: seen.__setitem__(key, x)

    hooks = [("hook_embed", lambda x, _hp: x + add_embed)]
    for layer, block in enumerate(model.blocks):
        t = transcoders[layer]
        n1 = frozen_norm(block.ln1, clean[f"blocks.{layer}.hook_resid_pre"])
        n2 = frozen_norm(block.ln2, clean[f"blocks.{layer}.hook_resid_mid"])
        frozen = clean[f"blocks.{layer}.hook_mlp_out"] - t.skip_term(clean[f"blocks.{layer}.ln2.hook_normalized"])
        pattern = clean[f"blocks.{layer}.attn.hook_pattern"]
        hooks += [(f"blocks.{layer}.hook_resid_pre", keep(("pre", layer))),
                  (f"blocks.{layer}.ln1.hook_normalized", lambda x, _hp, n=n1, l=layer: n(seen[("pre", l)])),
                  (f"blocks.{layer}.attn.hook_pattern", lambda x, _hp, p=pattern: p.expand_as(x)),
                  (f"blocks.{layer}.hook_resid_mid", keep(("mid", layer))),
                  (f"blocks.{layer}.ln2.hook_normalized",
                   lambda x, _hp, n=n2, l=layer: seen.setdefault(("in", l), n(seen[("mid", l)]))),
                  (f"blocks.{layer}.hook_mlp_out",
                   lambda x, _hp, t=t, fz=frozen, l=layer: t.skip_term(seen[("in", l)]) + fz + add_mlp[l])]
    n_final = frozen_norm(model.ln_final, clean[f"blocks.{L - 1}.hook_resid_post"])
    hooks += [(f"blocks.{L - 1}.hook_resid_post", keep("final")),
              ("ln_final.hook_normalized", lambda x, _hp: n_final(seen["final"]))]
    with torch.no_grad(), model.hooks(hooks):
        logits = model(ids[None].expand(B, T))  # (B, T, vocab)
    values = torch.zeros(B, graph.n_nodes)
    for i, (layer, pos, f) in enumerate(graph.features.tolist()):
        t = transcoders[layer]
        values[:, i] = seen[("in", layer)][:, pos] @ t.W_enc[:, f] + t.b_enc[f]
    last = logits[:, -1]
    values[:, graph.logit_nodes] = (last - last.mean(-1, keepdim=True))[:, graph.logit_tokens]
    A = torch.zeros(graph.n_nodes, graph.n_nodes)
    A[:, :len(sources)] = (values[:-1] - values[-1]).T
    return A, values[-1], last[-1]


CASES = [("gpt2: LayerNorm, biases, learned positions", GPT2_LIKE, True),
         ("gpt2 without skip transcoders", GPT2_LIKE.replace(n_layer=2), False),
         ("llama: RMSNorm, rotary, SwiGLU, grouped-query", LLAMA_LIKE, True)]


@pytest.mark.parametrize("name, cfg, skip", CASES, ids=[c[0].split(":")[0] for c in CASES])
def test_every_edge_equals_the_frozen_models_response(name, cfg, skip):
    model = GPT(cfg, seed=0).eval()
    transcoders = random_transcoders(cfg, skip=skip)
    ids = torch.randint(cfg.vocab_size, (7,))
    graph = attribution_graph(model, random_transcoders(cfg, skip=skip, frozen=False), ids)  # as trained: grads on
    A, base, frozen_logits = frozen_oracle(model, transcoders, ids, graph)
    with torch.no_grad():
        clean_logits = model(ids[None])[0, -1]
    assert torch.allclose(frozen_logits, clean_logits, atol=1e-4)  # the oracle's frozen model is the clean run
    assert not graph.adjacency.requires_grad  # plain numbers, even from transcoders whose weights want gradients
    scale = float(A.abs().max())
    assert scale > 0 and float((graph.adjacency - A).abs().max()) <= 2e-5 * scale
    assert torch.allclose(graph.pre_activations, base[:graph.n_features], atol=1e-4)
    assert torch.allclose(graph.logit_values, base[graph.logit_nodes], atol=1e-4)


def test_rows_add_up_to_each_targets_value_when_nothing_else_feeds_it():
    """Completeness: with no biases, no position table (rotary) and b_dec = 0, the frozen model is
    linear in the nodes, so a feature's incoming edges sum to its pre-activation minus b_enc and a
    logit's to its logit minus the mean logit."""
    cfg = GPTConfig(vocab_size=40, block_size=16, n_layer=3, n_head=4, n_embd=32, bias=False, pos_embedding="rope")
    model = GPT(cfg, seed=1).eval()
    transcoders = random_transcoders(cfg, b_dec=False, seed=1)
    graph = attribution_graph(model, transcoders, torch.randint(40, (9,)))
    rows = graph.adjacency.sum(1)
    b_enc = torch.stack([transcoders[layer].b_enc[f] for layer, _, f in graph.features.tolist()])
    assert torch.allclose(rows[:graph.n_features] + b_enc, graph.pre_activations, atol=1e-4)
    assert torch.allclose(rows[graph.logit_nodes], graph.logit_values, atol=1e-4)
    assert float(graph.pre_activations.abs().max()) > 0.1  # not trivially zero


def test_structure_nodes_in_order_and_edges_only_where_the_model_lets_them_be():
    cfg = GPT2_LIKE
    model = GPT(cfg, seed=2).eval()
    transcoders = random_transcoders(cfg, seed=2)
    ids = torch.randint(cfg.vocab_size, (8,))
    g = attribution_graph(model, transcoders, ids)
    T, L, n_f = 8, cfg.n_layer, g.n_features
    assert isinstance(g, AttributionGraph) and g.n_nodes == n_f + L * T + T + g.n_logits
    keys = [tuple(r) for r in g.features.tolist()]
    assert keys == sorted(keys) and len(set(keys)) == n_f
    for layer, pos, f in keys:  # exactly the nonzero activations of each transcoder
        pass
    acts = {}
    _, cache = model.run_with_cache(ids[None])
    for layer, t in enumerate(transcoders):
        dense = t.encode(cache[f"blocks.{layer}.ln2.hook_normalized"][0])
        for pos, f in dense.nonzero().tolist():
            acts[(layer, pos, f)] = float(dense[pos, f])
    assert set(acts) == set(keys)
    assert torch.allclose(g.activations, torch.tensor([acts[key] for key in keys]))
    A = g.adjacency
    assert not A[n_f:g.logit_nodes.start].any() and not A[:, g.logit_nodes].any()  # no inputs; logits feed nothing
    layer_of = g.features[:, 0]
    pos_of = g.features[:, 1]
    later_or_same = (layer_of[None, :] >= layer_of[:, None]) | (pos_of[None, :] > pos_of[:, None])
    assert not A[:n_f, :n_f][later_or_same].any()  # a feature hears only earlier layers at its position or before
    err_layer = torch.arange(L).repeat_interleave(T)
    err_pos = torch.arange(T).repeat(L)
    blocked = (err_layer[None, :] >= layer_of[:, None]) | (err_pos[None, :] > pos_of[:, None])
    assert not A[:n_f, g.error_nodes][blocked].any()
    assert not A[:n_f, g.token_nodes][torch.arange(T)[None, :] > pos_of[:, None]].any()
    assert A[g.logit_nodes, g.token_nodes][:, -1].abs().min() > 0  # the last token reaches every logit


def test_logit_nodes_are_the_fewest_top_tokens_reaching_the_probability():
    model = GPT(GPT2_LIKE, seed=3).eval()
    transcoders = random_transcoders(GPT2_LIKE, seed=3)
    ids = torch.randint(50, (6,))
    with torch.no_grad():
        probs = torch.softmax(model(ids[None])[0, -1], -1)
    ranked, order = probs.sort(descending=True)
    for max_logits, logit_prob in ((10, 0.95), (3, 0.95), (50, 0.5), (10, 1.0)):
        g = attribution_graph(model, transcoders, ids, max_logits=max_logits, logit_prob=logit_prob)
        reach = int((ranked.cumsum(0) < logit_prob).sum()) + 1  # the fewest whose cumulative sum reaches it
        n = min(reach, max_logits)
        assert g.logit_tokens.tolist() == order[:n].tolist()
        assert torch.allclose(g.logit_probs, ranked[:n])


def test_small_blocks_give_the_same_graph_as_one_block(monkeypatch):
    """The block split (targets in position order, each block cut to the positions it needs) is an
    optimisation: equal to running every target in one block over every position."""
    model = GPT(LLAMA_LIKE, seed=4).eval()
    transcoders = random_transcoders(LLAMA_LIKE, seed=4)
    ids = torch.randint(50, (10,))
    monkeypatch.setattr(graph_module, "BLOCK_FLOATS", 1 << 30)
    whole = attribution_graph(model, transcoders, ids).adjacency
    monkeypatch.setattr(graph_module, "BLOCK_FLOATS", 1)  # 16 targets a block
    split = attribution_graph(model, transcoders, ids).adjacency
    assert torch.allclose(whole, split, atol=1e-5 * float(whole.abs().max()))


def test_a_relu_transcoder_set_and_a_bf16_model_work():
    model = GPT(GPT2_LIKE, seed=5).eval()
    transcoders = random_transcoders(GPT2_LIKE, seed=5)
    for t in transcoders:
        t.k = None
        t.b_enc -= 1.0  # fewer positive pre-activations
    ids = torch.randint(50, (5,))
    g = attribution_graph(model, transcoders, ids)
    A, _, _ = frozen_oracle(model, transcoders, ids, g)
    assert float((g.adjacency - A).abs().max()) <= 2e-5 * float(A.abs().max())
    g16 = attribution_graph(model.to(torch.bfloat16), transcoders, ids)
    assert g16.adjacency.dtype == torch.float32 and torch.isfinite(g16.adjacency).all()


def test_node_descriptions_and_labels():
    model = GPT(GPT2_LIKE, seed=6).eval()
    g = attribution_graph(model, random_transcoders(GPT2_LIKE, seed=6), torch.tensor([1, 2, 3, 4]))
    layer, pos, f = g.features[0].tolist()
    assert g.node(0) == {"kind": "feature", "layer": layer, "position": pos, "feature": f,
                         "activation": float(g.activations[0])}
    assert g.node(g.error_nodes.start + 5)["kind"] == "error" and g.node(g.error_nodes.start + 5)["layer"] == 1
    assert g.label(g.token_nodes.start + 2, decode=lambda t: "abcde"[t]) == "tok 'd' @2"
    assert g.label(g.logit_nodes.start).startswith("logit #")
    assert g.kinds().count("token") == 4 and g.kinds()[-1] == "logit"
    with pytest.raises(IndexError):
        g.node(g.n_nodes)


def test_bad_input_is_refused_by_name(monkeypatch):
    model = GPT(GPT2_LIKE, seed=7).eval()
    transcoders = random_transcoders(GPT2_LIKE, seed=7)
    ids = torch.randint(50, (6,))
    with pytest.raises(TranscodersDoNotFit, match="2 transcoders but the model has 3 layers"):
        attribution_graph(model, transcoders[:2], ids)
    other = random_transcoders(GPT2_LIKE.replace(n_embd=16, n_head=2))
    with pytest.raises(TranscodersDoNotFit, match="width 16 -> 16 but this model's residual stream is 32"):
        attribution_graph(model, other, ids)
    with pytest.raises(TranscodersDoNotFit, match="replaces layer 2"):
        attribution_graph(model, [transcoders[0], transcoders[2], transcoders[1]], ids)
    with pytest.raises(PromptTooLong, match="block_size\\) is 16"):
        attribution_graph(model, transcoders, torch.randint(50, (17,)))
    monkeypatch.setattr(graph_module, "MAX_NODES", 100)
    with pytest.raises(PromptTooLong, match="use at most 6 tokens") as err:  # (100 - 10 logits) // 13 per position
        attribution_graph(model, transcoders, torch.randint(50, (8,)))
    assert isinstance(err.value, UserError)
    monkeypatch.undo()
    with pytest.raises(CircuitError, match="max_logits"):
        attribution_graph(model, transcoders, ids, max_logits=0)
    with pytest.raises(CircuitError, match="vocabulary"):
        attribution_graph(model, transcoders, torch.tensor([3, 99]))
    for cfg, match in ((GPT2_LIKE.replace(ln_placement="post"), "post-LN"),
                       (GPT2_LIKE.replace(residual=False), "no residual")):
        with pytest.raises(UnsupportedModel, match=match):
            attribution_graph(GPT(cfg, seed=0), transcoders, ids)
    with pytest.raises(UnsupportedModel, match="not a gptcore GPT"):
        attribution_graph(torch.nn.Linear(2, 2), transcoders, ids)
