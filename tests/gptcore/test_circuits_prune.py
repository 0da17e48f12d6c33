"""Pruning (issue 38): circuit-tracer's rules, against an oracle written here from those rules in
float64 with the influence as w·((I - Ā)⁻¹ - I), and the worked example its behaviour was
checked on (the numbers come from running circuit-tracer 0.5.0 itself)."""
import numpy as np
import pytest
import torch

from gptcore import AttributionGraph, CircuitError, attribution_graph, cumulative_influence, node_influence, prune_graph
from gptcore.model.gpt import GPT

from test_circuits_graph import GPT2_LIKE, random_transcoders

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_graph(A, features, n_layers, tokens, logit_probs):
    A = torch.as_tensor(A, dtype=torch.float32)
    n_f = len(features)
    return AttributionGraph(
        adjacency=A, features=torch.as_tensor(features, dtype=torch.long).reshape(n_f, 3),
        activations=torch.ones(n_f), logit_tokens=torch.arange(len(logit_probs)),
        logit_probs=torch.as_tensor(logit_probs, dtype=torch.float32), tokens=torch.as_tensor(tokens),
        n_layers=n_layers, error_norms=torch.zeros(n_layers, len(tokens)), pre_activations=torch.zeros(n_f),
        logit_values=torch.zeros(len(logit_probs)))


def oracle(A, n_features, n_tokens, probs, node_t, edge_t):
    """The rules, step by step, in float64."""
    A = np.asarray(A, dtype=np.float64)
    N, n_logits = len(A), len(probs)

    def normalise(M):
        M = np.abs(M)
        return M / np.maximum(M.sum(1, keepdims=True), 1e-10)

    def influence(M, w):
        return w @ (np.linalg.inv(np.eye(N) - M) - np.eye(N))

    def threshold(scores, keep):
        ranked = np.sort(scores.ravel())[::-1]
        share = np.cumsum(ranked) / ranked.sum()
        return ranked[min(int(np.searchsorted(share, keep, side="left")), len(ranked) - 1)]

    w = np.zeros(N)
    w[N - n_logits:] = probs
    infl = influence(normalise(A), w)
    nodes = infl >= threshold(infl, node_t)
    nodes[N - n_logits - n_tokens:] = True
    P = A.copy()
    P[~nodes] = 0
    P[:, ~nodes] = 0
    PN = normalise(P)
    scores = PN * (influence(PN, w) + w)[:, None]
    edges = scores >= threshold(scores, edge_t)
    n_sources = N - n_logits - n_tokens
    first = True
    while True:
        before = nodes.copy()
        if not first:
            edges[~nodes] = False
            edges[:, ~nodes] = False
        nodes[:n_sources] &= edges[:, :n_sources].any(0)
        nodes[:n_features] &= edges[:n_features].any(1)
        if (nodes == before).all():
            break
        first = False
    order = np.argsort(-infl, kind="stable")
    cumulative = np.zeros(N)
    cumulative[order] = np.cumsum(infl[order]) / infl.sum()
    return nodes, edges, cumulative, infl


def random_dag(rng):
    """A random graph with an attribution graph's causal shape."""
    L, T = int(rng.integers(1, 4)), int(rng.integers(2, 6))
    n_f = int(rng.integers(2, 25))
    feats = np.stack([rng.integers(0, L, n_f), rng.integers(0, T, n_f), rng.integers(0, 100, n_f)], 1)
    feats = feats[np.lexsort((feats[:, 2], feats[:, 1], feats[:, 0]))]
    n_e, n_l = L * T, int(rng.integers(1, 4))
    N = n_f + n_e + T + n_l
    A = np.zeros((N, N))
    for i, (layer, pos, _) in enumerate(feats):
        for j, (layer2, pos2, _) in enumerate(feats):
            if layer2 < layer and pos2 <= pos and rng.random() < 0.6:
                A[i, j] = rng.normal()
        for layer2 in range(layer):
            for pos2 in range(pos + 1):
                if rng.random() < 0.5:
                    A[i, n_f + layer2 * T + pos2] = rng.normal()
        for pos2 in range(pos + 1):
            if rng.random() < 0.6:
                A[i, n_f + n_e + pos2] = rng.normal()
    for k in range(n_l):
        row = N - n_l + k
        for j, (_, pos2, _) in enumerate(feats):
            if pos2 == T - 1 and rng.random() < 0.7:
                A[row, j] = rng.normal()
        A[row, n_f + n_e + T - 1] = rng.normal()
    probs = rng.dirichlet(np.ones(n_l)) * 0.9
    return make_graph(A, feats, L, list(range(T)), probs)


def test_the_worked_example():
    """L=2, T=2, features f0=(L0, p1, #7) and f1=(L1, p1, #3), one logit at p=0.7; circuit-tracer 0.5.0
    keeps every node but err(0,1), five edges, and gives these cumulative scores."""
    A = torch.zeros(9, 9)
    f0, f1, err01, tok1, logit = 0, 1, 3, 7, 8
    A[f0, tok1], A[f1, f0], A[f1, err01] = 2.0, 1.5, 0.3
    A[logit, f1], A[logit, f0], A[logit, tok1] = 1.0, -0.5, 0.2
    g = make_graph(A, [[0, 1, 7], [1, 1, 3]], 2, [50256, 42], [0.7])
    assert node_influence(g).tolist() == pytest.approx([0.549, 0.4118, 0, 0.0686, 0, 0, 0, 0.6314, 0], abs=1e-4)
    nodes, edges = prune_graph(g, 0.8, 0.98)
    assert nodes.tolist() == [True, True, False, False, False, False, True, True, True]
    assert sorted(map(tuple, edges.nonzero().tolist())) == [(0, 7), (1, 0), (8, 0), (8, 1), (8, 7)]
    assert cumulative_influence(g).tolist() == pytest.approx([0.711, 0.959, 1, 1, 1, 1, 1, 0.380, 1], abs=1e-3)


@pytest.mark.parametrize("node_t, edge_t", [(0.8, 0.98), (0.5, 0.9), (0.95, 0.99)])
def test_masks_equal_the_rules_on_random_graphs(node_t, edge_t):
    rng = np.random.default_rng(0)
    for _ in range(40):
        g = random_dag(rng)
        nodes, edges = prune_graph(g, node_t, edge_t)
        want_nodes, want_edges, cumulative, infl = oracle(g.adjacency.numpy(), g.n_features, g.n_pos,
                                                          g.logit_probs.numpy(), node_t, edge_t)
        assert nodes.tolist() == want_nodes.tolist()
        assert edges.numpy().tolist() == want_edges.tolist()
        assert node_influence(g).numpy() == pytest.approx(infl, rel=1e-4, abs=1e-6)
        if len(set(np.round(infl, 6))) == len(infl):  # ties may take either rank (torch's sort is not stable)
            assert cumulative_influence(g).numpy() == pytest.approx(cumulative, abs=1e-5)


def test_influence_kept_by_the_caller_prunes_as_computing_it_does():
    """The panel and the JSON export compute node_influence once and pass it: the same masks, the same scores."""
    rng = np.random.default_rng(1)
    for _ in range(10):
        g = random_dag(rng)
        kept = node_influence(g)
        for a, b in zip(prune_graph(g, 0.6, 0.9, influence=kept), prune_graph(g, 0.6, 0.9)):
            assert torch.equal(a, b)
        assert torch.equal(cumulative_influence(g, kept), cumulative_influence(g))


def test_a_real_graph_prunes_to_a_connected_circuit():
    model = GPT(GPT2_LIKE, seed=0).eval()
    g = attribution_graph(model, random_transcoders(GPT2_LIKE), torch.randint(50, (8,)))
    nodes, edges = prune_graph(g)
    assert nodes[g.token_nodes].all() and nodes[g.logit_nodes].all()
    assert 0 < int(nodes[:g.n_features].sum()) < g.n_features
    kept = nodes.nonzero()[:, 0]
    for i in kept.tolist():
        if i < g.error_nodes.stop:  # features and errors feed something kept
            assert edges[:, i].any()
        if i < g.n_features:  # features are fed by something kept
            assert edges[i].any()
    assert not edges[~nodes].any() and not edges[:, ~nodes].any()  # only edges between kept nodes
    assert (g.adjacency[edges] != 0).all()  # a kept edge is a real one


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.8", True])
def test_thresholds_outside_zero_one_are_refused(bad):
    g = make_graph(torch.zeros(4, 4), [], 1, [1], [0.5])
    with pytest.raises(CircuitError, match="node_threshold"):
        prune_graph(g, node_threshold=bad)
