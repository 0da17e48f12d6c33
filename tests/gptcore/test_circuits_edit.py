"""transcoder_edit and edited_transcoders (issue 38, the panel's clamp): against a forward written out
here block by block, with each edited MLP output computed from a dense encode and a full sort."""
import pytest
import torch

from gptcore import CircuitError, GPTConfig, attribution_graph, edited_transcoders, transcoder_edit
from gptcore.model.gpt import GPT
from tests.gptcore.test_circuits_graph import random_transcoders

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CFG = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=4, n_embd=32)


def _model():
    torch.manual_seed(0)
    return GPT(CFG, seed=0).eval()


def _top_k_dense(t, u):
    """(T, width): ReLU of the pre-activations where they are among the row's k largest, by a full sort."""
    pre = u @ t.W_enc + t.b_enc  # (T, width)
    order = torch.argsort(pre, dim=-1, descending=True)
    keep = torch.zeros_like(pre, dtype=torch.bool).scatter_(-1, order[:, : t.k], True)
    return torch.where(keep, pre.relu(), torch.zeros_like(pre))


def _edited_forward(model, transcoders, ids, edits):
    """The model written out: every block's MLP output plus (v − f) W_dec for each edited feature."""
    T = len(ids)
    x = model.embed(ids[None]) + model.pos_embed(torch.arange(T))[None]  # (1, T, C)
    for layer, block in enumerate(model.blocks):
        x = x + block.attn(block.ln1(x))
        u = block.ln2(x)  # (1, T, C)
        m = block.mlp(u)
        dense = _top_k_dense(transcoders[layer], u[0])  # (T, width)
        for (l, f), v in edits.items():
            if l == layer:
                m = m + ((v - dense[:, f])[:, None] * transcoders[layer].W_dec[f])[None]
        x = x + m
    return model._unembed(model.ln_final(x))[0]  # (T, vocab)


def test_an_edit_changes_the_logits_as_the_written_out_forward_does_and_only_inside_the_block():
    model, transcoders = _model(), random_transcoders(CFG, width=24, k=3)
    ids = torch.tensor([3, 14, 15, 9, 2, 6, 5, 35])
    # a feature that is active somewhere (its own value there changes little), one clamped high, one ablated
    with torch.no_grad():
        plain = model(ids[None])[0]
        active = _top_k_dense(transcoders[1], model.run_with_cache(ids[None], names_filter="blocks.1.ln2.hook_normalized")[1]
                              ["blocks.1.ln2.hook_normalized"][0])
        f_active = int(active.sum(0).argmax())
        edits = {(1, f_active): 0.0, (0, 5): 3.0, (2, 11): -1.5}
        with transcoder_edit(model, transcoders, edits):
            edited = model(ids[None])[0]
        after = model(ids[None])[0]
        expected = _edited_forward(model, transcoders, ids, edits)
    torch.testing.assert_close(edited, expected, rtol=1e-5, atol=1e-5)
    assert (edited - plain).abs().max() > 1e-3  # the edit did something
    torch.testing.assert_close(after, plain, rtol=0, atol=0)  # and it is gone after the block


def test_holding_a_feature_at_its_own_value_changes_nothing():
    """v = f on a row where f is that row's activation: the edit must be the identity there (the error kept)."""
    model, transcoders = _model(), random_transcoders(CFG, width=24, k=3)
    ids = torch.tensor([7, 7, 7, 7])  # one token repeated: every position has the same ln2 input at layer 0
    with torch.no_grad():
        plain = model(ids[None])[0]
        u0 = model.run_with_cache(ids[None], names_filter="blocks.0.ln2.hook_normalized")[1][
            "blocks.0.ln2.hook_normalized"][0]
        dense = _top_k_dense(transcoders[0], u0)
        f = int(dense[0].argmax())
        with transcoder_edit(model, transcoders, {(0, f): float(dense[0, f])}):
            edited = model(ids[None])[0]
    torch.testing.assert_close(edited[0], plain[0], rtol=1e-5, atol=1e-6)


def test_the_edited_graph_shows_the_clamped_feature_at_its_value_and_keeps_the_layers_errors():
    model, transcoders = _model(), random_transcoders(CFG, width=24, k=3)
    ids = torch.tensor([3, 14, 15, 9, 2, 6])
    plain = attribution_graph(model, transcoders, ids)
    edits = {(1, 4): 2.5}
    with transcoder_edit(model, transcoders, edits):
        graph = attribution_graph(model, edited_transcoders(transcoders, edits), ids)
        logits = model(ids[None])[0, -1]
    rows = [i for i, (l, _p, f) in enumerate(graph.features.tolist()) if (l, f) == (1, 4)]
    assert len(rows) == len(ids) and torch.allclose(graph.activations[rows], torch.tensor(2.5))  # every token
    torch.testing.assert_close(graph.error_norms[:2], plain.error_norms[:2], rtol=1e-4, atol=1e-6)  # up to layer 1
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(graph.logit_probs, probs[graph.logit_tokens], rtol=1e-5, atol=1e-6)
    assert graph.adjacency[graph.logit_nodes][:, rows].abs().sum() > 0  # the clamped nodes write into the logits


def test_bad_edits_are_refused_naming_the_entry():
    model, transcoders = _model(), random_transcoders(CFG, width=24, k=3)
    for edits, words in (({}, "non-empty"), ({(5, 1): 0.0}, "layer 5 does not exist"),
                         ({(0, 99): 0.0}, "feature 99 does not exist"), ({3: 0.0}, "(layer, feature)"),
                         ({(0, 1): float("nan")}, "finite"), ({(0, 1): "x"}, "a number")):
        with pytest.raises(CircuitError, match=words.replace("(", r"\(").replace(")", r"\)")):
            with transcoder_edit(model, transcoders, edits):
                pass
    assert not any(hp.active for hp in model.hook_dict.values())  # nothing left attached
