"""Transcoder files in circuit-tracer's per-layer layout, and the graph JSON its viewer reads (issue 38).

circuit-tracer itself is not a test dependency (benches/circuit_tracer_check.py opens our files with
it); here the layout is checked as it is documented (key set, orientation, config.yaml) and a file
written the way its `to_safetensors` writes one is opened by ours."""
import json

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import save_file

from gptcore import CircuitError, attribution_graph, graph_json, load_transcoders, prune_graph, save_graph_json, \
    save_transcoders
from gptcore.interp.circuits.export import cantor
from gptcore.model.gpt import GPT

from test_circuits_graph import GPT2_LIKE, random_transcoders

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("k, skip", [(3, True), (3, False), (None, True)])
def test_save_then_load_gives_the_same_transcoders(tmp_path, k, skip):
    ts = random_transcoders(GPT2_LIKE, k=3, skip=skip)
    for t in ts:
        t.k = k
        t.metadata = {"seed": 4, "training_tokens": 1000}
    save_transcoders(ts, tmp_path, model_name="tiny", scan="tiny-tc")
    back = load_transcoders(tmp_path)
    assert len(back) == 3
    x = torch.randn(5, 32)
    for a, b in zip(ts, back):
        assert (b.k, b.layer, b.skip, b.metadata) == (k, a.layer, skip, {"seed": 4, "training_tokens": 1000})
        for name, p in a.named_parameters():
            assert torch.equal(p, dict(b.named_parameters())[name]), name
        assert torch.allclose(a(x), b(x))


def test_the_files_are_circuit_tracers_layout(tmp_path):
    ts = random_transcoders(GPT2_LIKE, width=24, k=3)
    save_transcoders(ts, tmp_path, model_name="tiny")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "layer_0.safetensors", "layer_1.safetensors",
                                                          "layer_2.safetensors"]
    with safe_open(str(tmp_path / "layer_1.safetensors"), framework="pt") as f:
        assert sorted(f.keys()) == ["W_dec", "W_enc", "W_skip", "b_dec", "b_enc"]  # its loader is strict
        tensors = {name: f.get_tensor(name) for name in f.keys()}
        header = f.metadata()
    t = ts[1]
    assert tensors["W_enc"].shape == (24, 32) and torch.equal(tensors["W_enc"], t.W_enc.T)  # row per feature
    assert torch.equal(tensors["W_dec"], t.W_dec) and torch.equal(tensors["W_skip"], t.W_skip.T)  # (d_out, d_in)
    assert all(v.dtype == torch.float32 for v in tensors.values())
    x = torch.randn(4, 32)  # circuit-tracer's maths on its tensors: x @ W_enc.T + b_enc; a @ W_dec + x @ W_skip.T + b_dec
    pre = x @ tensors["W_enc"].T + tensors["b_enc"]
    assert torch.allclose(pre, t.pre_acts(x), atol=1e-6)
    f = t.encode(x)
    assert torch.allclose(f @ tensors["W_dec"] + x @ tensors["W_skip"].T + tensors["b_dec"], t.decode(f, x), atol=1e-6)
    assert (header["activation"], header["k"], header["layer"]) == ("topk", "3", "1")
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config["model_kind"] == "transcoder_set" and config["model_name"] == "tiny"
    # circuit-tracer's name for the MLP's input: TransformerLens's ln2.hook_normalized is before ln2's weight
    assert (config["feature_input_hook"], config["feature_output_hook"]) == ("mlp.hook_in", "hook_mlp_out")
    assert (config["activation"], config["k"], config["scan"]) == ("topk", 3, tmp_path.name)


def test_a_relu_skip_set_written_as_circuit_tracer_writes_it_opens(tmp_path):
    """Its TranscoderSet.to_safetensors writes layer_{i}.safetensors with W_enc (width, d), W_dec,
    b_enc, b_dec, W_skip (d_out, d_in), no header and no config.yaml; a bf16 file is read as float32."""
    gen = torch.Generator().manual_seed(0)
    theirs = []
    for layer in range(2):
        w = {"W_enc": torch.randn(20, 8, generator=gen), "W_dec": torch.randn(20, 8, generator=gen),
             "b_enc": torch.randn(20, generator=gen) - 0.5, "b_dec": torch.randn(8, generator=gen),
             "W_skip": torch.randn(8, 8, generator=gen)}
        save_file({k: v.to(torch.bfloat16) if layer else v for k, v in w.items()},
                  str(tmp_path / f"layer_{layer}.safetensors"))
        theirs.append({k: v.to(torch.bfloat16).float() if layer else v for k, v in w.items()})
    ours = load_transcoders(tmp_path)
    x = torch.randn(6, 8)
    for w, t in zip(theirs, ours):
        assert t.k is None and t.W_enc.dtype == torch.float32
        acts = torch.relu(x @ w["W_enc"].T + w["b_enc"])
        assert torch.allclose(t.encode(x), acts, atol=1e-5)
        assert torch.allclose(t(x), acts @ w["W_dec"] + x @ w["W_skip"].T + w["b_dec"], atol=1e-4)


def test_a_set_reading_transformerlens_ln2_hook_normalized_is_folded_with_the_models_norm(tmp_path):
    """TransformerLens's ln2.hook_normalized is (x - mean) / sigma, before ln2's weight and bias; such a
    set, given the model, must act on our MLP input exactly as it acts on that x̂."""
    cfg = GPT2_LIKE.replace(n_layer=2)
    model = GPT(cfg, seed=0).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for block in model.blocks:  # a norm that is not the identity
            block.ln2.weight.copy_(1 + 0.5 * torch.rand(32, generator=gen))
            block.ln2.bias.copy_(0.3 * torch.randn(32, generator=gen))
    raw = []
    for layer in range(2):
        w = {"W_enc": torch.randn(40, 32, generator=gen) / 6, "W_dec": torch.randn(40, 32, generator=gen),
             "b_enc": torch.randn(40, generator=gen) - 1, "b_dec": torch.randn(32, generator=gen),
             "W_skip": torch.randn(32, 32, generator=gen) / 6}
        save_file(w, str(tmp_path / f"layer_{layer}.safetensors"))
        raw.append(w)
    (tmp_path / "config.yaml").write_text("model_kind: transcoder_set\nfeature_input_hook: ln2.hook_normalized\n"
                                          "feature_output_hook: hook_mlp_out\n")
    with pytest.raises(CircuitError, match="pass the model"):
        load_transcoders(tmp_path)
    with pytest.raises(CircuitError, match="2 layers of transcoders but the model has 3"):
        load_transcoders(tmp_path, model=GPT(GPT2_LIKE, seed=0))
    ours = load_transcoders(tmp_path, model=model)
    ids = torch.randint(50, (2, 9))
    _, cache = model.run_with_cache(ids)
    for layer, (t, w) in enumerate(zip(ours, raw)):
        x = cache[f"blocks.{layer}.hook_resid_mid"]
        x_hat = (x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
        u = cache[f"blocks.{layer}.ln2.hook_normalized"]  # ours: the MLP's input
        acts = torch.relu(x_hat @ w["W_enc"].T + w["b_enc"])
        with torch.no_grad():
            assert torch.allclose(t.encode(u), acts, atol=1e-4)
            assert torch.allclose(t(u), acts @ w["W_dec"] + x_hat @ w["W_skip"].T + w["b_dec"], atol=1e-4)
        assert t.metadata["folded_from"] == "ln2.hook_normalized"


def test_a_shorter_set_replaces_a_longer_one(tmp_path):
    save_transcoders(random_transcoders(GPT2_LIKE), tmp_path)
    save_transcoders(random_transcoders(GPT2_LIKE.replace(n_layer=2)), tmp_path)
    assert len(load_transcoders(tmp_path)) == 2 and not (tmp_path / "layer_2.safetensors").exists()


def _write_layer(folder, layer=0, **tensors):
    base = {"W_enc": torch.zeros(6, 4), "W_dec": torch.zeros(6, 4), "b_enc": torch.zeros(6), "b_dec": torch.zeros(4)}
    base.update(tensors)
    save_file({k: v for k, v in base.items() if v is not None}, str(folder / f"layer_{layer}.safetensors"))


@pytest.mark.parametrize("setup, match", [
    (lambda d: _write_layer(d, **{"activation_function.threshold": torch.zeros(6)}), "JumpReLU"),
    (lambda d: _write_layer(d, b_dec=None), "lacks b_dec"),
    (lambda d: _write_layer(d, extra=torch.zeros(1)), "does not: extra"),
    (lambda d: _write_layer(d, W_enc=torch.zeros(4, 6)), "W_enc is \\(4, 6\\)"),
    (lambda d: (_write_layer(d, 0), _write_layer(d, 2)), "every layer from 0 to 2"),
    (lambda d: None, "no layer_"),
    (lambda d: (_write_layer(d), (d / "config.yaml").write_text("model_kind: cross_layer_transcoder\n")),
     "cross_layer_transcoder"),
    (lambda d: (_write_layer(d), (d / "config.yaml").write_text("feature_input_hook: hook_resid_mid\n")),
     "hook_resid_mid.*supported: mlp.hook_in or ln2.hook_normalized"),
])
def test_unusable_folders_are_refused_by_name(tmp_path, setup, match):
    setup(tmp_path)
    with pytest.raises(CircuitError, match=match):
        load_transcoders(tmp_path)


def _graph(seed=0, T=8):
    model = GPT(GPT2_LIKE, seed=seed).eval()
    return attribution_graph(model, random_transcoders(GPT2_LIKE, seed=seed), torch.randint(50, (T,)))


def test_graph_json_holds_what_the_viewer_reads():
    g = _graph()
    chars = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMN"
    data = graph_json(g, slug="demo", scan="tiny", decode=lambda t: chars[t])
    assert set(data) == {"metadata", "qParams", "nodes", "links"}
    meta = data["metadata"]
    assert meta["prompt_tokens"] == [chars[t] for t in g.tokens.tolist()] and meta["prompt"] == "".join(meta["prompt_tokens"])
    assert (meta["slug"], meta["scan"], meta["schema_version"], meta["node_threshold"]) == ("demo", "tiny", 1, 0.8)
    nodes, edges = prune_graph(g)
    by_id = {n["node_id"]: n for n in data["nodes"]}
    assert len(by_id) == len(data["nodes"])  # ids are unique (error ids do not collide with features)
    required = {"node_id", "feature", "layer", "ctx_idx", "feature_type", "jsNodeId", "clerp"}
    assert all(required <= set(n) for n in data["nodes"])
    for link in data["links"]:
        assert link["source"] in by_id and link["target"] in by_id
    assert len(data["links"]) == int(edges.sum())  # every kept edge (both ends kept) is a link
    index = {n["node_id"]: i for i, n in ((i, _id(g, i)) for i in range(g.n_nodes))}
    for link in data["links"]:
        assert link["weight"] == pytest.approx(float(g.adjacency[index[link["target"]], index[link["source"]]]))
    kinds = [n["feature_type"] for n in data["nodes"]]
    assert kinds.count("embedding") == g.n_pos and kinds.count("logit") == g.n_logits
    logit = next(n for n in data["nodes"] if n["is_target_logit"])
    top = int(g.logit_tokens[0])
    assert logit["clerp"] == f'Output "{chars[top]}" (p={float(g.logit_probs[0]):.3f})' and logit["influence"] is None
    assert logit["layer"] == str(GPT2_LIKE.n_layer + 1) and logit["ctx_idx"] == g.n_pos - 1
    feature = next(n for n in data["nodes"] if n["feature_type"] == "cross layer transcoder")
    layer, f, pos = map(int, feature["node_id"].split("_"))
    assert feature["feature"] == cantor(layer, f) and feature["ctx_idx"] == pos and feature["layer"] == str(layer)
    json.dumps(data)  # plain JSON


def _id(g, i):
    n = g.node(i)
    if n["kind"] == "feature":
        return {"node_id": f"{n['layer']}_{n['feature']}_{n['position']}"}
    if n["kind"] == "error":
        return {"node_id": f"{n['layer']}_-1_{n['position']}"}
    if n["kind"] == "token":
        return {"node_id": f"E_{n['token']}_{n['position']}"}
    return {"node_id": f"{g.n_layers + 1}_{n['token']}_{g.n_pos - 1}"}


def test_cantor_pairs_are_unique_and_match_the_formula():
    seen = {cantor(layer, f) for layer in range(12) for f in range(300)}
    assert len(seen) == 12 * 300 and cantor(1, 2) == 8 and cantor(0, 0) == 0


def test_save_graph_json_writes_the_file_and_lists_it_once(tmp_path):
    g = _graph(seed=1)
    path = save_graph_json(g, tmp_path, slug="one", scan="tiny")
    save_graph_json(_graph(seed=2), tmp_path, slug="two", scan="tiny")
    save_graph_json(g, tmp_path, slug="one", scan="tiny", prompt="again")
    assert path == tmp_path / "one.json" and json.loads(path.read_text())["metadata"]["prompt"] == "again"
    index = json.loads((tmp_path / "graph-metadata.json").read_text())
    assert [m["slug"] for m in index["graphs"]] == ["two", "one"]
    with pytest.raises(CircuitError, match="slug"):
        save_graph_json(g, tmp_path, slug="../x", scan="tiny")
