"""session.circuits (issue 38) without Qt: transcoders trained, saved with their metrics and reopened; the
prompt's graph equal to gptcore's on the saved set; a node's contexts and logits against a brute-force
computation; edits as session state; every bad input refused by name; the walk over a run's steps."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from explorer.session.circuits import domain as circuits_domain
from explorer.session.circuits import store, training
from explorer.session.circuits.domain import CircuitsDomain
from explorer.session.circuits.store import CircuitsError, NoTranscoders
from explorer.session.core import Session
from tests.explorer.tiny_transcoders import PROMPT, copy_set_for, train_tiny_set

pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny session's transcoders (width 64, k 4), trained once; each test copies them into its own data folder."""
    tset, corpus = train_tiny_set(tmp_path_factory.mktemp("circuits-data"))
    return {"folder": store.Path(tset.folder), "corpus": corpus, "tset": tset}


@pytest.fixture
def session(trained):
    """A tiny session whose transcoders are saved where it looks for them (this test's data folder)."""
    s = Session.tiny()
    copy_set_for(s.info, trained["folder"])
    s.corpus = str(trained["corpus"])
    return s


def test_training_saves_the_set_beside_the_model_with_metrics_that_a_new_session_reads_back(trained, session,
                                                                                            monkeypatch):
    tset = trained["tset"]
    folder = store.Path(tset.folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml", "layer_0.safetensors", "layer_1.safetensors",
                                                        "metrics.json"]
    assert folder.parent.name == "tiny-test" and folder.name == "w64-k4"  # the user's data folder, by model
    m = tset.metrics
    assert len(m["fvu"]) == 2 and all(0 <= v < 1 for v in m["fvu"])
    assert all(3.0 <= v <= 4.0 for v in m["l0"])  # at most k; b_enc starts negative (issue 39's equal start), so
    # after the few steps of this tiny fit the ReLU still cuts some top-k values
    assert m["ce_loss_recovered"] == pytest.approx((m["ce_zero"] - m["ce_replaced"]) / (m["ce_zero"] - m["ce_clean"]))
    assert tset.measured_on == "corpus.txt" and m["tokens"] > 0
    monkeypatch.setattr(training, "measure", lambda *a, **k: pytest.fail("measured again"))
    again = session.circuits.use("file", session.corpus)  # a restart: read from beside the set, never re-measured
    assert again.metrics == m and again.width == 64 and again.k == 4 and not again.walked


def test_the_graph_is_gptcores_graph_of_the_saved_set_pruned_at_the_thresholds(session, monkeypatch):
    from gptcore import attribution_graph, load_transcoders, node_influence, prune_graph

    g = session.circuits.graph(PROMPT, 0.8, 0.98)
    model, ids = session.model, torch.tensor(session.encode(PROMPT))
    full = attribution_graph(model, load_transcoders(session.circuits.current_set().folder, model), ids)
    nodes, edges = prune_graph(full, 0.8, 0.98)
    kept = nodes.nonzero()[:, 0]
    assert g.n_nodes == full.n_nodes and list(g.node_ids) == kept.tolist()
    targets, sources = edges[kept][:, kept].nonzero(as_tuple=True)
    assert sorted(zip(g.edge_dst.tolist(), g.edge_src.tolist())) == sorted(zip(targets.tolist(), sources.tolist()))
    assert np.allclose(g.edge_weight, full.adjacency[kept[g.edge_dst], kept[g.edge_src]].numpy(), atol=1e-6)
    influence = node_influence(full)
    errors, features = float(influence[full.error_nodes].sum()), float(influence[: full.n_features].sum())
    assert g.error_share == pytest.approx(errors / (errors + features))
    assert g.tokens == tuple(session.token_strings(ids.tolist())) and g.logit_probs[0] == pytest.approx(
        float(torch.softmax(model(ids[None])[0, -1].detach(), -1).max()), rel=1e-5)
    calls = []  # a moved threshold re-prunes the kept graph: no new graph
    monkeypatch.setattr("gptcore.attribution_graph", lambda *a, **k: calls.append(1))
    tighter = session.circuits.graph(PROMPT, 0.5, 0.9)
    assert not calls and tighter.n_kept <= g.n_kept and tighter.n_nodes == g.n_nodes


def test_a_feature_nodes_contexts_and_logits_are_its_activation_and_decoder_row(session):
    from gptcore import load_transcoders

    g = session.circuits.graph(PROMPT, 1.0, 1.0)  # every node with influence kept (a random model's are weak)
    i = next(i for i in range(g.n_kept) if g.kind[i] == 0)
    layer, feature = int(g.layer[i]), int(g.feature[i])
    detail = session.circuits.node(int(g.node_ids[i]), "file", session.corpus)
    assert detail.kind == "feature" and (detail.layer, detail.feature) == (layer, feature)
    assert f"L{layer} #{feature}" in detail.title
    t = load_transcoders(session.circuits.current_set().folder, session.model)[layer]
    _train, held, _name = session.circuits._corpus_ids("file", session.corpus)
    rows = []
    with torch.no_grad(), session.model.hooks([(t.input_hook, lambda x, hp: rows.append(x.reshape(-1, x.shape[-1])))]):
        session.model(held, logits=None)
    dense = t.encode(torch.cat(rows))[:, feature].detach()  # (N,) by a dense encode of every held-out token
    peaks = sorted((float(np.max(acts)) for _tokens, acts in detail.contexts), reverse=True)
    assert peaks[0] == pytest.approx(float(dense.max()), rel=1e-4)
    direction = t.W_dec[feature] * session.model.ln_final.weight  # (d,)
    logits = (session.model.unembed.weight @ direction)[: session.model.config.vocab_size].detach()
    assert detail.promoted[0][0] == session.token_strings([int(logits.argmax())])[0]
    assert detail.promoted[0][1] == pytest.approx(float(logits.max()), rel=1e-4)
    weights = [w for _label, w, _k in detail.incoming]
    assert weights and sorted(weights, key=abs, reverse=True) == weights


def test_an_edit_is_session_state_the_model_and_the_graph_follow(session):
    from gptcore import load_transcoders, transcoder_edit

    g = session.circuits.graph(PROMPT, 1.0, 1.0)
    i = max((i for i in range(g.n_kept) if g.kind[i] == 0), key=lambda i: g.influence[i])
    key = (int(g.layer[i]), int(g.feature[i]))
    ids = torch.tensor([session.encode(PROMPT)])
    with torch.no_grad():
        plain = session.model(ids)
    state = session.circuits.edit({key: 0.0})
    assert state.features == ((key, 0.0),) and state.text() == f"L{key[0]} #{key[1]} ablated"
    with torch.no_grad():
        edited = session.model(ids)  # the hooks are on the model itself: every panel sees the edit
        session.interp.set_feature_edits(None, {})
        transcoders = load_transcoders(session.circuits.current_set().folder, session.model)
        with transcoder_edit(session.model, transcoders, {key: 0.0}):
            expected = session.model(ids)
    torch.testing.assert_close(edited, expected)
    assert (edited - plain).abs().max() > 0
    session.circuits.edit({key: 3.0})
    g2 = session.circuits.graph(PROMPT, 1.0, 1.0)
    assert g2.edits == ((key, 3.0),) and g2.version == session.version
    held = [j for j in range(g2.n_kept) if g2.kind[j] == 0 and (int(g2.layer[j]), int(g2.feature[j])) == key]
    assert all(g2.value[j] == pytest.approx(3.0) for j in held)  # the clamped feature shows at its value
    session.interp.clear_ablation()
    assert not session.interp.ablation.active
    from gptcore import neuron_dictionary  # another panel's edit (the Features panel's neurons): drawn, and said

    session.interp.set_feature_edits(neuron_dictionary(session.model, 1), {3: 0.0}, "layer 1 MLP neurons")
    g3 = session.circuits.graph(PROMPT)
    assert g3.edits == () and g3.note.startswith("feature 3 ablated (layer 1 MLP neurons) is in force")
    session.interp.clear_ablation()
    assert session.circuits.graph(PROMPT).note == ""


def test_bad_input_is_refused_by_name(session, trained, tmp_path, monkeypatch):
    from gptcore import PromptTooLong, TranscodersDoNotFit, UnsupportedModel

    with pytest.raises(CircuitsError, match="type a prompt"):
        session.circuits.graph("")
    with monkeypatch.context() as patch, pytest.raises(PromptTooLong, match="at most 17 .*graph holds at most 200"):
        patch.setattr(circuits_domain, "MAX_NODES", 200)  # the cap, made small: 2·4 + 2 + 1 = 11 nodes a token
        session.circuits.graph(PROMPT * 3)
    session.interp.set_ablation([(0, 1)])
    with pytest.raises(CircuitsError, match=r"ablation is in force \(1 head ablated\).*Reset"):
        session.circuits.graph(PROMPT)
    session.interp.clear_ablation()
    other = Session.tiny(n_layer=3)  # the same name, so it looks in the same folder: 2 transcoders, 3 layers
    with pytest.raises(TranscodersDoNotFit, match="2 transcoders but the model has 3 layers"):
        other.circuits.graph(PROMPT)
    wide = Session.tiny(n_embd=32)
    with pytest.raises(TranscodersDoNotFit, match="width 64 -> 64 but this model's residual stream is 32"):
        wide.circuits.graph(PROMPT)
    post = Session.tiny(ln_placement="post")
    with pytest.raises(UnsupportedModel, match="post-LN"):
        post.circuits.graph(PROMPT)
    shutil.rmtree(store.find_saved(session.info))
    with pytest.raises(NoTranscoders, match="Train transcoders"):
        session.circuits.graph(PROMPT)
    assert not session.circuits.saved()


def related_char_run(root, steps=(0, 10, 20)):
    """test_session_features' run folder of a 5-character model, its kept steps rewritten as one model
    drifting a little from step to step, as training does: a warm start from a neighbour fits."""
    from gptcore.model.gpt import GPT
    from tests.explorer.test_session_features import _char_run

    folder = _char_run(root, steps)
    model, gen = GPT(folder.load_step("gpt2", steps[0]).config, init="gpt2", seed=0), torch.Generator().manual_seed(1)
    for step in steps:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * p.std().nan_to_num(0.02) * torch.randn(p.shape, generator=gen))
        folder.save_step_weights(model, "gpt2", step)
    return folder


def test_the_walk_over_a_run_leaves_the_anchor_as_trained_and_each_step_opens_its_own_set(tmp_path):
    from gptcore import attribution_graph, load_transcoders
    from explorer.session.circuits.formation import formed_step

    root = tmp_path / "run"
    related_char_run(root)
    s = Session.tiny()
    follower = s.training.open(root)
    s.training.show_step(follower, "gpt2", 20)
    anchor = s.circuits.train(width=32, k=4, tokens=8192, corpus="run")
    anchor_folder = store.Path(anchor.folder)
    before = {p.name: p.read_bytes() for p in anchor_folder.iterdir()}
    folders = s.circuits.walk(tokens=20_480)
    assert sorted(folders) == [0, 10, 20] and folders[20] == anchor_folder
    assert sorted(p.name for p in (root / "transcoders").iterdir()) == [
        "gpt2-step000000-w32-k4-walk", "gpt2-step000010-w32-k4-walk", "gpt2-step000020-w32-k4",
        "gpt2-w32-k4-over-training.json"]
    assert {p.name: p.read_bytes() for p in anchor_folder.iterdir()} == before  # the user's set, as trained
    prompt = "abc cab ba ac"
    formation = s.circuits.formation(prompt, 1.0, 1.0)  # every edge kept: this random run's links are weak
    assert list(formation.steps) == [0, 10, 20] and formation.weights[-1] == formation.final_weight > 0
    assert formation.link.endswith(f"→ {formation.token!r}")
    # the link's weight at step 10, read from a graph computed here with that step's walked set
    model10 = follower.folder.load_step("gpt2", 10).eval()
    set10 = load_transcoders(folders[10], model10)
    assert all(t.metadata.get("aligned", True) for t in set10)  # a step near the anchor: warm-started, aligned
    g10 = attribution_graph(model10, set10, torch.tensor(s.encode(prompt)))
    layer, feature, pos = (int(v) for v in formation.link.split(" → ")[0].strip("L").replace("#", "").replace("@", "")
                           .split())
    token = s.encode(formation.token)[0]
    rows = ((g10.features[:, 0] == layer) & (g10.features[:, 1] == pos) & (g10.features[:, 2] == feature)).nonzero()
    logit = (g10.logit_tokens == token).nonzero()
    expected = float(g10.adjacency[g10.logit_nodes.start + int(logit[0, 0]), int(rows[0, 0])]) \
        if len(rows) and len(logit) else 0.0
    assert formation.weights[1] == pytest.approx(expected, abs=1e-6)
    assert formation.formed_step == formed_step(formation.steps, formation.weights, formation.final_weight)
    s.training.show_step(follower, "gpt2", 10)  # the step slider: that step's own (walked) set
    assert s.circuits.use("run").walked and s.circuits.current_set().folder == str(folders[10])
    with pytest.raises(CircuitsError, match="fitted by a walk"):
        s.circuits.walk(tokens=8192)


def test_formed_step_is_the_first_step_from_which_the_link_stays_at_half_its_final_weight():
    from explorer.session.circuits.formation import formed_step

    steps = np.array([0, 100, 200, 300, 400])
    assert formed_step(steps, np.array([0.0, 0.6, 0.2, 0.7, 1.0]), 1.0) == 300  # a dip at 200: formed after it
    assert formed_step(steps, np.array([0.5, 0.6, 0.9, 0.7, 1.0]), 1.0) == 0
    assert formed_step(steps, np.array([0.0, 0.0, 0.0, 0.0, 1.0]), 1.0) == 400
    assert formed_step(steps, np.zeros(5), 0.0) is None


def test_the_domain_is_one_line_in_the_session():
    from explorer.session.core import DOMAINS

    assert DOMAINS["circuits"] is CircuitsDomain and isinstance(Session.tiny().circuits, CircuitsDomain)


def test_a_walked_step_keeps_its_neighbours_transcoder_when_fitting_explains_less():
    from gptcore import fit_transcoder
    from tests.gptcore.test_circuits_transcoder import random_transcoder, sparse_map_data

    x, y, _ = sparse_map_data(n=4000, d=8, n_true=12)
    good = fit_transcoder(x, y, width=32, k=4, tokens=16_384, batch=512, lr=3e-3)
    bad = random_transcoder(d=8, width=32, k=4)
    kept = training._better(bad, good, x, y, step=250)
    assert kept is not good and torch.equal(kept.W_dec, good.W_dec)  # a copy of the neighbour's, saved as this step's
    assert kept.metadata["walk_fvu"] == pytest.approx(training.fvu(good, x, y))
    assert kept.metadata["fitted_fvu"] == pytest.approx(training.fvu(bad, x, y))
    assert kept.metadata["fitted_fvu"] > kept.metadata["walk_fvu"]
    assert "step 250" in kept.metadata["walk"]
    assert training._better(good, bad, x, y, step=250) is good and "walk" not in good.metadata


def test_a_step_no_warm_start_explains_is_fitted_afresh_and_left_out_of_the_comparison(tmp_path):
    """test_session_features' run: three unrelated random models, so no neighbour's transcoder fits the next."""
    from gptcore import load_transcoders
    from tests.explorer.test_session_features import _char_run

    root = tmp_path / "run"
    _char_run(root)
    s = Session.tiny()
    follower = s.training.open(root)
    s.training.show_step(follower, "gpt2", 20)
    s.circuits.train(width=32, k=4, tokens=8192, corpus="run")
    folders = s.circuits.walk(tokens=20_480)
    walked = load_transcoders(folders[0])[0]
    assert walked.metadata["aligned"] is False and "from scratch" in walked.metadata["walk"]
    formation = s.circuits.formation("abc cab ba ac", 1.0, 1.0)
    unaligned = [i for i, step in enumerate(formation.steps) if step in (0, 10)
                 and load_transcoders(folders[int(step)])[0].metadata.get("aligned", True) is False]
    assert unaligned and all(formation.weights[i] == 0 for i in unaligned)
