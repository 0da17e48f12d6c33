"""A feature's dashboard as JSON in the layouts SAEDashboard and Neuronpedia use (issue 39), so what was
found here opens in their tools: built from the very results the Features panel shows (the table, the
feature's detail and its dashboard), never measured again. Plain data in, dicts out; no torch, no Qt.

Two layouts:
- SAEDashboard's batch file (`NeuronpediaRunner`'s batch-N.json): {model_id, layer, sae_set,
  sae_id_suffix, features: [one feature]}, snake_case; Neuronpedia's converter reads it as it is.
- Neuronpedia's feature, as its /api/feature/{model}/{layer}/{index} serves one: the feature row
  (camelCase ids, snake_case statistics, `topkCosSim*` neighbours with the feature itself first at
  cosine 1, as Neuronpedia stores them) with its activation rows nested under "activations".

What differs from theirs, by design: examples are windows of held-out text around the token they were
picked for (not whole 128-token prompts); the random group is written as the interval (0, max] holding
every token where the feature fires; `correlated_*` are empty (not computed here, as they often are
there); `pos_*`/`neg_*` hold the panel's 20 rows (SAEDashboard's default is 10); floats keep 6 decimals.
"""
from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone

import numpy as np

DECIMALS = 6
SITE_SETS = {"resid": "res", "mlp": "mlp-out"}


def model_slug(name: str) -> str:
    """A model name as a Neuronpedia-style id: 'GPT-2 small shape, random init' -> 'gpt-2-small-shape-random-init'."""
    return re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-") or "model"


def source_set(source) -> str:
    """The dictionary as a source-set name: 'mlp-neurons', or 'res-sae-w1024-k16' for an SAE."""
    if source.kind == "neurons":
        return "mlp-neurons"
    return f"{SITE_SETS.get(source.site, source.site)}-sae-w{source.width}-k{source.k}"


def source_id(source) -> str:
    """Neuronpedia's `layer`: '{layer}-{source set}', e.g. '1-res-sae-w1024-k16'."""
    return f"{source.layer}-{source_set(source)}"


def _floats(values) -> list[float]:
    return [round(float(v), DECIMALS) for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _centres(edges) -> list[float]:
    edges = np.asarray(edges, dtype=np.float64).reshape(-1)
    return _floats((edges[:-1] + edges[1:]) / 2)


def _bins(group) -> tuple[float, float, float]:
    """(bin_min, bin_max, bin_contains) as SAEDashboard writes them: the top group is -1, max, -1."""
    if group.kind == "top":
        return -1.0, round(float(group.high), DECIMALS), -1.0
    return round(float(group.low), DECIMALS), round(float(group.high), DECIMALS), round(float(group.contains), DECIMALS)


def saedashboard_feature(table, detail, dash) -> dict:
    """One entry of a batch's `features`, with every key Neuronpedia's converter reads."""
    f = int(detail.feature)
    if dash.feature != f:
        raise ValueError(f"the dashboard is of feature {dash.feature} and the detail of feature {f}: export one feature")
    activations = []
    for group in dash.groups:
        low, high, contains = _bins(group)
        for ex in group.examples:
            activations.append({"tokens": [str(t) for t in ex.tokens], "values": _floats(ex.acts), "bin_min": low,
                                "bin_max": high, "bin_contains": contains, "qualifying_token_index": int(ex.qualifying)})
    sequences, per_sequence = dash.held_out
    return {
        "feature_index": f,
        "activations": activations,
        "pos_str": [str(t) for t, _v in detail.promoted], "pos_values": _floats([v for _t, v in detail.promoted]),
        "neg_str": [str(t) for t, _v in detail.suppressed], "neg_values": _floats([v for _t, v in detail.suppressed]),
        "frac_nonzero": round(float(table.density[f]), DECIMALS),
        "freq_hist_data_bar_heights": _floats(detail.hist_counts), "freq_hist_data_bar_values": _centres(detail.hist_edges),
        "logits_hist_data_bar_heights": _floats(dash.logit_hist_counts),
        "logits_hist_data_bar_values": _centres(dash.logit_hist_edges),
        "neuron_alignment_indices": _ints(dash.alignment_ids), "neuron_alignment_values": _floats(dash.alignment_values),
        "neuron_alignment_l1": _floats(dash.alignment_l1),
        "correlated_neurons_indices": [], "correlated_neurons_pearson": [], "correlated_neurons_l1": [],
        "correlated_features_indices": [], "correlated_features_pearson": [], "correlated_features_l1": [],
        "n_prompts_total": int(sequences), "n_tokens_in_prompt": int(per_sequence), "dataset": str(table.corpus),
        "decoder_weights_dist": [], "vector": [],
    }


def saedashboard_batch(model_id: str, table, detail, dash) -> dict:
    """SAEDashboard's batch file holding this one feature."""
    return {"model_id": model_id, "layer": int(table.source.layer), "sae_set": source_set(table.source),
            "sae_id_suffix": None, "features": [saedashboard_feature(table, detail, dash)]}


def _row_id(*parts) -> str:
    """A 25-character id in cuid's shape ('c' + 24 characters), the same for the same example."""
    return "c" + hashlib.sha1("/".join(map(str, parts)).encode("utf-8")).hexdigest()[:24]


def neuronpedia_feature(model_id: str, table, detail, dash, created: datetime | None = None) -> dict:
    """The feature row with its activation rows, as Neuronpedia's feature API returns one."""
    feature = saedashboard_feature(table, detail, dash)
    layer, index = source_id(table.source), str(feature["feature_index"])
    stamp = (created or datetime.now(timezone.utc)).replace(microsecond=0).isoformat()
    rows = []
    for n, act in enumerate(feature["activations"]):
        values = act["values"]
        peak = int(np.argmax(values)) if values else 0
        rows.append({
            "id": _row_id(model_id, layer, index, n), "tokens": act["tokens"], "values": values,
            "modelId": model_id, "layer": layer, "index": index,
            "maxValue": max(values, default=0.0), "maxValueTokenIndex": peak, "minValue": min(values, default=0.0),
            "creatorId": None, "binMin": act["bin_min"], "binMax": act["bin_max"], "binContains": act["bin_contains"],
            "qualifyingTokenIndex": act["qualifying_token_index"],
            "dfaValues": [], "dfaTargetIndex": None, "dfaMaxValue": None, "lossValues": [], "logitContributions": None,
            "dataIndex": None, "dataSource": str(table.corpus), "createdAt": stamp,
        })
    stats = {key: value for key, value in feature.items()
             if key not in ("feature_index", "activations", "n_prompts_total", "n_tokens_in_prompt", "dataset", "vector")}
    return {
        "modelId": model_id, "layer": layer, "index": index, "creatorId": None, "createdAt": stamp,
        "maxActApprox": max((r["maxValue"] for r in rows), default=0.0),
        "hasVector": False, "vector": [], "vectorLabel": None, "vectorDefaultSteerStrength": 10,
        "hookName": str(table.source.hook),
        "topkCosSimIndices": [int(detail.feature)] + _ints(dash.neighbour_ids),
        "topkCosSimValues": [1.0] + _floats(dash.neighbour_cosines),
        **stats,
        "activations": rows,
    }
