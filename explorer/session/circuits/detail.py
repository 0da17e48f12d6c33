"""One node of the graph, told in full (issue 38): for a transcoder feature, what it reads and what it writes.

A transcoder's feature reads the MLP's input (`blocks.L.ln2.hook_normalized`) and writes into the MLP's
output, so the Features panel's machinery fits it as it fits an SAE on that site (explorer/session/features):
its activation on every held-out token is read from each token's top-k latents (`dashboard.feature_column`,
encoded once per layer and kept), its strongest contexts are cut from the held-out text
(`stats.context_of`), and the tokens it promotes and suppresses are its decoder row through the final
norm's gain and the unembedding (`stats.write_directions` / `stats.logit_rows`: the logit lens of the
direction it writes). Its edges come from the graph itself. No Qt.
"""
from __future__ import annotations

import numpy as np

from explorer.session.circuits.pruned import node_long_label, strongest_edges
from explorer.session.circuits.results import NodeDetail
from explorer.session.features import stats
from explorer.session.features.dashboard import feature_column
from explorer.session.features.store import EVAL_BYTES, first_sequences  # held-out MLP inputs kept per layer


def held_rows(model, transcoder, held, cancel=None) -> dict:
    """The held-out state of one layer: its MLP inputs (N, d) on `held` (S, T), with the token ids, as
    `feature_column` reads it (it caches each token's top-k latents in the same dict)."""
    held = first_sequences(held, EVAL_BYTES // (4 * transcoder.d_in))
    rows = stats.hook_rows(model, held, transcoder.input_hook, cancel)  # (N, d)
    return {"rows": rows, "ids": held.reshape(-1).numpy(), "seq_len": int(held.shape[1])}


def node_detail(graph, index: int, kept: np.ndarray, token_text, *, model=None, transcoder=None, ev=None,
                corpus: str = "", version: int = 0) -> NodeDetail:
    """The node `index` of `graph`; a feature's contexts and logits need its layer's `transcoder`, the
    held-out state `ev` (held_rows) and `model`."""
    n = graph.node(index)
    incoming, outgoing = strongest_edges(graph, index, token_text, kept)
    where = f"at position {n['position']} ({token_text(int(graph.tokens[n['position']]))!r})"
    if n["kind"] != "feature":
        titles = {"error": f"error of layer {n['layer']}'s transcoder {where} · norm {n.get('norm', 0.0):.3g}: what "
                           f"the transcoder does not explain of the MLP's output there",
                  "token": f"token {where}: its embedding row",
                  "logit": f"logit {token_text(n['token'])!r} · p = {n.get('probability', 0.0):.1%} at the last "
                           f"position (its value: the logit minus the mean logit)"}
        return NodeDetail(int(index), n["kind"], titles[n["kind"]], int(n["layer"]), -1, incoming=incoming,
                          outgoing=outgoing, version=version)
    feature, layer = int(n["feature"]), int(n["layer"])
    acts = feature_column(transcoder, ev, feature)  # (N,)
    decode = _decoder(token_text)
    contexts = stats.top_contexts(acts, ev, decode)
    promoted, suppressed = stats.promoted_suppressed(
        model, stats.write_directions(model, transcoder, "sae", layer, [feature]), decode)
    density = float(np.mean(acts > 0)) if acts.size else 0.0
    title = (f"{node_long_label(graph, index, token_text)}: layer {layer}'s transcoder feature {feature} {where} · "
             f"activation {n['activation']:.3g} · active on {density:.2%} of {acts.size:,} held-out tokens")
    return NodeDetail(int(index), "feature", title, layer, feature, contexts, promoted, suppressed, incoming,
                      outgoing, corpus, version)


def _decoder(token_text):
    def decode(ids) -> list[str]:
        return [token_text(int(i)) for i in ids]

    return decode
