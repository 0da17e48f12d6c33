"""Routes at length (issue 34): gptcore.flow_route walks down from the top layer and computes only
the rows the route reaches; its route must be flow_graph(information_flow(...))'s, edge for edge."""
import numpy as np
import pytest
import torch

import gptcore
from gptcore import GPT, GPTConfig, RouteState, flow_graph, flow_route, information_flow
from gptcore.interp.flow import FlowError
from tests.gptcore.test_flow import LLAMA


def gpt2_style(seed=0, **layout):
    """A small GPT-2 layout with weights pushed away from the init, so heads read distinct tokens and
    routes branch (at the init's scale every route is the residual diagonal)."""
    cfg = GPTConfig(vocab_size=97, block_size=64, n_layer=3, n_head=4, n_embd=32, **layout)
    model = GPT(cfg, seed=seed).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.15 * torch.randn(p.shape, generator=gen))
    return model


def llama_style(seed=0):
    """Rotary, grouped-query (2 value heads for 4 query heads), RMSNorm, SwiGLU, no biases."""
    return gpt2_style(seed, **LLAMA)


def prompt(n, seed):
    return torch.randint(0, 97, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def assert_same_route(full, got):
    """Same edges in the same order, weights within 1e-5, and a route that branches (teeth)."""
    assert [e[:2] for e in got.route] == [e[:2] for e in full.route]
    np.testing.assert_allclose([e[2] for e in got.route], [e[2] for e in full.route], atol=1e-5, rtol=0)
    assert got.position == full.position and got.route_nodes == full.route_nodes


CASES = [(0, 40, -1, 0.04), (1, 40, 17, 0.02), (2, 25, 0, 0.1), (3, 60, 33, 0.01), (4, 12, 5, 0.3)]


@pytest.mark.parametrize("make", [gpt2_style, llama_style], ids=["gpt2", "llama"])
@pytest.mark.parametrize("seed, n, position, threshold", CASES)
def test_route_equals_the_full_definitions(make, seed, n, position, threshold):
    model, ids = make(), prompt(n, seed)
    full = flow_graph(information_flow(model, ids), position, threshold)
    got = flow_route(model, ids, position, threshold)
    assert_same_route(full, got)
    assert len(full.route) >= 5
    for src, dst, _w in got.route:  # the per-head split and residual of every route edge, too
        if dst.startswith("A"):
            np.testing.assert_allclose(got.head_weights(src, dst), full.head_weights(src, dst), atol=1e-5)
            assert got.residual_weight(dst) == pytest.approx(full.residual_weight(dst), abs=1e-5)


def test_only_the_rows_the_route_reaches_are_computed():
    model, ids = gpt2_style(), prompt(60, 3)
    state = RouteState(model, ids)
    graph = state.graph(33, 0.01)
    reached = {dst for _src, dst, _w in graph.route if dst.startswith("A")}
    assert state.rows_computed == len(reached)  # one row per attention node on the route, nothing else
    assert state.rows_computed < 0.2 * model.config.n_layer * len(ids)
    again = state.graph(33, 0.02)  # a higher threshold reaches a subset: no new row
    assert state.rows_computed == len(reached)
    assert_same_route(flow_graph(information_flow(model, ids), 33, 0.02), again)


def test_a_window_adds_every_edge_into_its_positions():
    model, ids = gpt2_style(), prompt(40, 0)
    full = flow_graph(information_flow(model, ids), -1, 0.04)
    got = RouteState(model, ids).graph(-1, 0.04, window=(20, 30))
    inside = lambda e: 20 <= int(e[1].split("_")[1]) < 30  # noqa: E731
    want = {e[:2]: e[2] for e in full.edges if inside(e)}
    have = {e[:2]: e[2] for e in got.edges if inside(e)}
    assert set(have) == set(want) and len(want) > 50
    assert max(abs(have[k] - want[k]) for k in want) < 1e-5
    outside = {e[:2] for e in got.edges if not inside(e)}
    assert outside == {e[:2] for e in got.route if not inside(e)}  # outside the window: the route only
    assert_same_route(full, got)


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablation_is_honoured(mode):
    model, ids = gpt2_style(), prompt(30, 1)
    reference = None if mode == "zero" else [prompt(30, 7), prompt(20, 8)]
    clean = flow_route(model, ids, -1, 0.02)
    with gptcore.ablate(model, heads=[(1, 2), (2, 0)], mode=mode, reference=reference):
        full = flow_graph(information_flow(model, ids), -1, 0.02)
        got = flow_route(model, ids, -1, 0.02)
        state = RouteState(model, ids)
    assert_same_route(full, got)
    assert state.replaced_heads == ((1, 2), (2, 0))
    before, after = ({e[:2]: e[2] for e in g.route} for g in (clean, got))
    assert set(before) != set(after) or max(abs(before[k] - after[k]) for k in after) > 1e-3  # it changed the route


def test_a_hook_that_rewrites_the_pattern_is_honoured():
    """A listener on hook_pattern: the layer's pattern is kept as the forward made it (sharpened here),
    not recomputed from q and k, exactly as information_flow reads it."""
    model, ids = gpt2_style(), prompt(30, 2)

    def sharpen(pattern, hook):  # (B, nh, T, S) -> rows still sum to 1, causal zeros stay zero
        p = pattern ** 3
        return p / p.sum(-1, keepdim=True)

    with model.hooks([("blocks.1.attn.hook_pattern", sharpen)]):
        full = flow_graph(information_flow(model, ids), -1, 0.02)
        got = flow_route(model, ids, -1, 0.02)
    assert_same_route(full, got)
    plain = flow_graph(information_flow(model, ids), -1, 0.02)
    assert [e[:2] for e in plain.route] != [e[:2] for e in full.route]  # the hook mattered


def test_row_shares_index_like_the_dense_array():
    model, ids = llama_style(), prompt(20, 5)
    full = flow_graph(information_flow(model, ids), -1, 0.04)
    got = flow_route(model, ids, -1, 0.04)
    A = [(int(d[1:].split("_")[0]), int(d.split("_")[1]), int(s.split("_")[1])) for s, d, _ in got.route if d[0] == "A"]
    layer, i, j = (np.array(x) for x in zip(*A))
    np.testing.assert_allclose(got.head_shares[layer, i, j], full.head_shares[layer, i, j], atol=1e-5)
    assert np.all(got.head_shares[0, 0, 0] == 0) or (0, 0) in {(a, b) for a, b, _ in A}  # not computed: zeros


def test_refusals_are_information_flows_and_flow_graphs():
    from types import SimpleNamespace

    model = gpt2_style()
    for ids, words in (([7], "at least 2 tokens"), ([], "empty")):
        with pytest.raises(ValueError, match=words):
            flow_route(model, ids)
    no_layers = SimpleNamespace(config=SimpleNamespace(n_layer=0, ln_placement="pre", residual=True))
    with pytest.raises(FlowError, match="0 layers"):
        flow_route(no_layers, [1, 2, 3])
    post = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=8, ln_placement="post"), seed=0)
    with pytest.raises(FlowError, match="pre-LN"):
        flow_route(post, [1, 2, 3])
    for bad in (5, -6):
        with pytest.raises(FlowError, match="outside the prompt"):
            flow_route(model, [1, 2, 3, 4, 5], position=bad)
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(FlowError, match="between 0 and 1"):
            flow_route(model, [1, 2, 3], threshold=bad)
