"""The feature dashboard's session half (issue 39): example groups, nearest features, logits and density
histograms, each checked against a brute-force computation written here; the cheap per-feature column
against the dense encode it replaces; and the JSON exports' fields and types against what SAEDashboard's
converter and Neuronpedia read (the research notes' required keys), with values equal to the results."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from explorer.session.core import Session
from explorer.session.features import dashboard as dash_mod
from explorer.session.features import neuronpedia
from explorer.session.features.domain import FeaturesError
from explorer.session.features.stats import dense_acts

pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture
def sae_session(corpus):
    s = Session.tiny(block_size=64)
    table = s.features.train(1, "resid", width=64, k=4, tokens=16_384, corpus="file", path=corpus)
    return s, table


def _held(session):
    """The held-out rows, ids and sequence length the domain measured (what the dashboard draws from)."""
    ev = session.features._eval
    return ev, ev["rows"], ev["ids"], ev["seq_len"]


def test_the_cheap_feature_column_equals_the_dense_encode(sae_session, corpus):
    session, table = sae_session
    ev, rows, _ids, _T = _held(session)
    dictionary = session.features._dictionary
    dense = dense_acts(dictionary, rows).numpy()  # (N, width): the slow path it replaces
    for f in range(table.source.width):
        np.testing.assert_allclose(dash_mod.feature_column(dictionary, ev, f), dense[:, f], rtol=1e-5, atol=1e-6)
    session.features.use("neurons", 0, "mlp", corpus="file", path=corpus)
    ev, rows, _ids, _T = _held(session)
    for f in (0, 7, session.config.d_mlp - 1):
        np.testing.assert_array_equal(dash_mod.feature_column(session.features._dictionary, ev, f), rows[:, f].numpy())


def test_the_table_encodes_the_held_out_rows_once_and_its_statistics_equal_the_dense_encode(sae_session):
    session, table = sae_session
    ev, rows, _ids, _T = _held(session)
    dictionary = session.features._dictionary
    assert ev["topk"][0] is dictionary  # the table's pass left each row's latents for the first selection
    dense = dense_acts(dictionary, rows)  # (N, width): the dense path the table's pass replaces
    np.testing.assert_array_equal(table.density, (dense > 0).float().mean(0).numpy())
    np.testing.assert_array_equal(table.max_act, dense.max(0).values.clamp(min=0).numpy())


def test_example_groups_are_saedashboards_top_intervals_and_random_draw(sae_session):
    session, table = sae_session
    ev, rows, ids, T = _held(session)
    f = int(np.argmax(table.max_act))
    acts = dense_acts(session.features._dictionary, rows).numpy()[:, f]  # (N,) the oracle
    d = session.features.dashboard(f, 5, 2)
    kinds = [g.kind for g in d.groups]
    assert kinds == ["top"] + ["interval"] * dash_mod.INTERVALS + ["random"]
    top = d.groups[0]
    want = [r for r in np.argsort(-acts, kind="stable")[:dash_mod.TOP_EXAMPLES] if acts[r] > 0]
    assert [e.row for e in top.examples] == want and (top.low, top.contains) == (-1.0, -1.0)
    assert top.high == pytest.approx(acts.max(), rel=1e-5)
    edges = np.linspace(0, acts.max(), dash_mod.INTERVALS + 1)
    for g, (lo, hi) in zip(d.groups[1:-1], reversed(list(zip(edges[:-1], edges[1:])))):
        inside = (acts > lo) & (acts <= hi + 1e-6)
        assert (g.low, g.high) == pytest.approx((lo, hi), rel=1e-5)
        assert g.contains == pytest.approx(inside.mean())  # share of ALL held-out tokens, zeros excluded
        assert len(g.examples) == min(dash_mod.PER_INTERVAL, int(inside.sum()))
        assert all(inside[e.row] for e in g.examples)
    random = d.groups[-1]
    assert len(random.examples) == min(dash_mod.RANDOM_EXAMPLES, int((acts > 0).sum()))
    assert all(acts[e.row] > 0 for e in random.examples) and random.contains == pytest.approx((acts > 0).mean())
    for g in d.groups:
        for e in g.examples:  # the window: up to 5 before and 2 after, never across a sequence
            start = (e.row // T) * T
            lo, hi = max(start, e.row - 5), min(start + T, e.row + 3)
            assert list(e.tokens) == session.token_strings(ids[lo:hi]) and e.qualifying == e.row - lo
            np.testing.assert_allclose(e.acts, acts[lo:hi], rtol=1e-5, atol=1e-6)
    wider = session.features.dashboard(f, 12, 3)  # another context width: the same tokens, longer windows
    assert [[e.row for e in g.examples] for g in wider.groups] == [[e.row for e in g.examples] for g in d.groups]
    assert max(len(e.tokens) for g in wider.groups for e in g.examples) > max(len(e.tokens) for g in d.groups
                                                                              for e in g.examples)


def test_nearest_features_are_the_decoder_cosines_top_ten(sae_session, corpus):
    session, table = sae_session
    w = session.features._dictionary.W_dec.detach()  # (width, d)
    unit = w / w.norm(dim=1, keepdim=True)
    for f in (0, 5, 63):
        cos = (unit @ unit[f]).numpy()  # brute force: every pair's cosine
        cos[f] = -np.inf
        want = np.argsort(-cos, kind="stable")[:dash_mod.NEIGHBOURS]
        d = session.features.dashboard(f)
        assert list(d.neighbour_ids) == list(want) and f not in d.neighbour_ids
        np.testing.assert_allclose(d.neighbour_cosines, cos[want], rtol=1e-4, atol=1e-5)
        assert d.neighbour_labels == tuple(table.labels[i] for i in want)
    neurons = session.features.use("neurons", 1, "mlp", corpus="file", path=corpus)
    out = session.model.blocks[1].mlp.c_proj.weight.detach()  # (n_embd, d_mlp): a neuron writes its column
    cols = (out / out.norm(dim=0, keepdim=True)).t()  # (d_mlp, n_embd)
    cos = (cols @ cols[9]).numpy()
    cos[9] = -np.inf
    d = session.features.dashboard(9)
    assert list(d.neighbour_ids) == list(np.argsort(-cos, kind="stable")[:10]) and len(neurons.ids) == out.shape[1]


def test_the_logits_histogram_and_alignment_are_of_the_write_direction(sae_session):
    session, _table = sae_session
    d = session.features.dashboard(3)
    direction = session.features._dictionary.W_dec[3].detach()
    with torch.no_grad():
        logits = session.model.unembed((direction * session.model.ln_final.weight)[None])[0].numpy()
    assert d.logit_hist_counts.sum() == session.config.vocab_size
    counts, edges = np.histogram(logits, bins=dash_mod.LOGIT_HIST_BINS)
    np.testing.assert_allclose(d.logit_hist_edges, edges, rtol=1e-4, atol=1e-6)
    assert np.abs(d.logit_hist_counts - counts).sum() <= 2  # float32 vs float64 at a bin's edge at most
    order = np.argsort(-np.abs(direction.numpy()), kind="stable")[:3]
    assert list(d.alignment_ids) == list(order)
    np.testing.assert_allclose(d.alignment_l1, np.abs(direction.numpy()[order]) / np.abs(direction.numpy()).sum(),
                               rtol=1e-5)


def test_the_detail_lists_twenty_promoted_and_suppressed_tokens(sae_session):
    session, _table = sae_session
    detail = session.features.detail(2)
    assert len(detail.promoted) == len(detail.suppressed) == 20
    values = [v for _t, v in detail.promoted]
    assert values == sorted(values, reverse=True) and [v for _t, v in detail.suppressed][0] == min(
        v for _t, v in detail.suppressed)


def test_the_density_histogram_counts_dead_and_dense_features():
    density = np.array([0.0, 0.0, 0.0, 1e-3, 1e-3, 0.01, 0.05, 0.2, 0.5, 1.0])
    h = dash_mod.density_histogram(density, tokens=1000)
    assert (h.dead, h.dense, h.features, h.tokens) == (3, 3, 10, 1000)  # 0.2, 0.5, 1.0 fire on > 10 %
    assert h.counts.sum() == 7 and h.edges[0] == pytest.approx(-3.0) and h.edges[-1] == 0.0
    for value in density[density > 0]:  # each fired feature in the bin holding its log10 density
        b = min(int(np.searchsorted(h.edges, np.log10(value), side="right")) - 1, len(h.counts) - 1)
        assert h.counts[b] >= 1


def test_a_context_width_out_of_range_is_named(sae_session):
    session, _table = sae_session
    with pytest.raises(FeaturesError, match="from 0 to 127"):
        session.features.dashboard(0, -1, 3)
    with pytest.raises(FeaturesError, match="features 0..63"):
        session.features.dashboard(64)


# -- JSON: the research notes' required fields and types (neuronpedia_dashboard.md) ---------------------
BATCH_KEYS = {"model_id": str, "layer": int, "sae_id_suffix": type(None), "features": list}
LISTS = ("pos_str", "pos_values", "neg_str", "neg_values", "freq_hist_data_bar_heights", "freq_hist_data_bar_values",
         "logits_hist_data_bar_heights", "logits_hist_data_bar_values", "neuron_alignment_indices",
         "neuron_alignment_values", "neuron_alignment_l1", "correlated_neurons_indices", "correlated_neurons_pearson",
         "correlated_neurons_l1", "correlated_features_indices", "correlated_features_pearson",
         "correlated_features_l1", "decoder_weights_dist", "activations")
ACTIVATION_KEYS = {"tokens": list, "values": list, "bin_min": float, "bin_max": float, "bin_contains": float,
                   "qualifying_token_index": int}
NEURONPEDIA_KEYS = {"modelId": str, "layer": str, "index": str, "maxActApprox": float, "hasVector": bool,
                    "topkCosSimIndices": list, "topkCosSimValues": list, "frac_nonzero": float, "activations": list}
NEURONPEDIA_ACTIVATION_KEYS = {"id": str, "tokens": list, "values": list, "modelId": str, "layer": str, "index": str,
                               "maxValue": float, "maxValueTokenIndex": int, "minValue": float, "binMin": float,
                               "binMax": float, "binContains": float, "qualifyingTokenIndex": int}


def _typed(obj: dict, keys: dict) -> None:
    for key, kind in keys.items():
        assert key in obj, key
        assert isinstance(obj[key], kind) and not (kind is int and isinstance(obj[key], bool)), (key, obj[key])


def test_the_saedashboard_json_has_what_neuronpedias_converter_reads(sae_session):
    session, table = sae_session
    f = int(np.argmax(table.max_act))
    detail, d = session.features.detail(f), session.features.dashboard(f)
    batch = json.loads(json.dumps(neuronpedia.saedashboard_batch("tiny", table, detail, d)))  # survives JSON
    _typed(batch, BATCH_KEYS)
    assert batch["layer"] == 1 and batch["sae_set"] == "res-sae-w64-k4"
    (feature,) = batch["features"]
    assert feature["feature_index"] == f and isinstance(feature["frac_nonzero"], float)
    for key in LISTS:
        assert isinstance(feature[key], list), key
    assert all(isinstance(v, str) for v in feature["pos_str"] + feature["neg_str"])
    assert all(isinstance(v, float) for v in feature["pos_values"] + feature["freq_hist_data_bar_values"])
    assert feature["pos_str"] == [t for t, _v in detail.promoted] and len(feature["pos_str"]) == 20
    np.testing.assert_allclose(feature["neg_values"], [v for _t, v in detail.suppressed], atol=1e-6)
    assert feature["frac_nonzero"] == pytest.approx(table.density[f], abs=1e-6)
    assert feature["freq_hist_data_bar_heights"] == list(map(float, detail.hist_counts))
    assert sum(feature["logits_hist_data_bar_heights"]) == session.config.vocab_size
    examples = [e for g in d.groups for e in g.examples]
    assert len(feature["activations"]) == len(examples)
    for act, e in zip(feature["activations"], examples):
        _typed(act, ACTIVATION_KEYS)
        assert act["tokens"] == list(e.tokens) and len(act["values"]) == len(act["tokens"])
        assert act["qualifying_token_index"] == e.qualifying
        np.testing.assert_allclose(act["values"], e.acts, atol=1e-6)
    first = feature["activations"][0]
    assert (first["bin_min"], first["bin_contains"]) == (-1.0, -1.0)  # the top group, as SAEDashboard writes it
    assert first["bin_max"] == pytest.approx(table.max_act[f], rel=1e-5)


def test_the_neuronpedia_json_is_a_feature_row_with_its_activation_rows(sae_session):
    session, table = sae_session
    f = 5
    detail, d = session.features.detail(f), session.features.dashboard(f)
    row = json.loads(json.dumps(neuronpedia.neuronpedia_feature("tiny", table, detail, d)))
    _typed(row, NEURONPEDIA_KEYS)
    assert (row["layer"], row["index"]) == ("1-res-sae-w64-k4", "5")
    assert row["topkCosSimIndices"] == [f] + list(map(int, d.neighbour_ids))  # itself first, as Neuronpedia stores
    assert row["topkCosSimValues"][0] == 1.0
    np.testing.assert_allclose(row["topkCosSimValues"][1:], d.neighbour_cosines, atol=1e-6)
    for act in row["activations"]:
        _typed(act, NEURONPEDIA_ACTIVATION_KEYS)
        assert len(act["id"]) == 25 and act["maxValue"] == max(act["values"])
        assert act["values"][act["maxValueTokenIndex"]] == act["maxValue"] and act["minValue"] == min(act["values"])
    if row["activations"]:
        assert row["maxActApprox"] == pytest.approx(max(a["maxValue"] for a in row["activations"]))
