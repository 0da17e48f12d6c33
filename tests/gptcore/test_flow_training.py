"""Routes over training (issue 29): each probe record keeps the strongest cross-token edges of the
route to the probe prompt's last token, the same edges `flow_graph` gives on that model."""
import json

import numpy as np
import pytest

from gptcore import GPT, GPTConfig
from gptcore.interp.flow import information_flow
from gptcore.interp.flow_graph import flow_graph, top_route_edges
from gptcore.training.data import corpus_from_text
from gptcore.training.recorder import ROUTE_EDGES, ROUTE_THRESHOLD, Recorder
from gptcore.training.run import RunFolder


@pytest.fixture
def recorder(tmp_path):
    rng = np.random.default_rng(0)
    corpus = corpus_from_text("".join(rng.choice(list("abcdefgh"), 4000)), "letters", "char", "test")
    return Recorder(RunFolder(tmp_path), corpus, block_size=32, seed=0), corpus


def model_for(corpus, **kw):
    import torch

    cfg = GPTConfig(vocab_size=corpus.vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=32, **kw)
    model = GPT(cfg, seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # away from the init's small values, so attention has structure
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model


def test_a_probe_records_the_strongest_route_edges(recorder):
    rec, corpus = recorder
    model = model_for(corpus).train()
    fields = rec.probe(model, "gpt2", 7)
    routes = fields["routes"]
    assert model.training  # the probe put training mode back
    graph = flow_graph(information_flow(model.eval(), rec.prompt), threshold=ROUTE_THRESHOLD)
    want = top_route_edges(graph, ROUTE_EDGES)
    assert 3 <= len(routes["edges"]) <= ROUTE_EDGES
    assert [e[:2] for e in routes["edges"]] == [list(e[:2]) for e in want]
    assert [e[2] for e in routes["edges"]] == pytest.approx([e[2] for e in want], abs=1e-4)
    weights = [e[2] for e in routes["edges"]]
    assert weights == sorted(weights, reverse=True) and weights[0] > ROUTE_THRESHOLD
    for src, dst, _ in routes["edges"]:  # between tokens: attention from j into i != j
        assert dst.startswith("A") and src.split("_")[1] != dst.split("_")[1]
    assert routes["position"] == len(rec.prompt) - 1 and routes["prompt"] == "".join(rec.prompt_text)
    json.dumps(fields)  # the trace writes it as one JSON line


def test_a_model_without_routes_still_probes_the_rest(recorder):
    rec, corpus = recorder
    fields = rec.probe(model_for(corpus, ln_placement="post"), "gpt2", 0)
    assert fields["routes"] is None and any("no routes" in n for n in fields["notes"])
    assert fields["icl"]["windows"] > 0
