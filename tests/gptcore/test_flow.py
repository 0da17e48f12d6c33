"""Information-flow routes (issue 29): the shares against the same definition computed here from
Hugging Face's GPT-2 (its own hooks, no gptcore model code), against a loop over single parts,
under ablation, on a Llama-style model, and the refusals."""
import numpy as np
import pytest
import torch

import gptcore
from gptcore import GPT, GPTConfig
from gptcore.interp.flow import FLOOR, FlowError, information_flow
from tests.gptcore.hf_oracle import hooked, saved_pair

IDS = [5, 17, 3, 40, 42, 8, 61, 23, 70, 11, 5, 17]


def shares(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """parts (P, C), whole (C,) -> (P,) the issue's definition, float64, written out plainly."""
    raw = (whole.abs().sum() - (whole[None] - parts).abs().sum(-1)).clamp_min(FLOOR)
    return raw / raw.sum()


@torch.no_grad()
def hf_flow(hf, ids: list[int]):
    """attn (L, T, T, nh), attn_residual, mlp, mlp_residual from HF's GPT-2: block inputs, ln_1 outputs,
    attention outputs (bias included) and patterns (output_attentions), MLP outputs, by HF's hooks."""
    got = {}
    t = hf.transformer
    handles = []
    for i, block in enumerate(t.h):
        handles += [
            block.register_forward_pre_hook(
                lambda m, a, kw, i=i: got.__setitem__(f"pre{i}", (a[0] if a else kw["hidden_states"])[0].double()),
                with_kwargs=True),
            block.ln_1.register_forward_hook(lambda m, a, out, i=i: got.__setitem__(f"ln{i}", out[0].double())),
            block.attn.register_forward_hook(lambda m, a, out, i=i: got.__setitem__(f"attn{i}", out[0][0].double())),
            block.mlp.register_forward_hook(lambda m, a, out, i=i: got.__setitem__(f"mlp{i}", out[0].double())),
        ]
    with hooked(handles), torch.no_grad():
        patterns = hf(torch.tensor([ids]), output_attentions=True).attentions  # L × (1, nh, T, T)
    T, C, nh = len(ids), hf.config.n_embd, hf.config.n_head
    hs = C // nh
    L = hf.config.n_layer
    attn, attn_res = np.zeros((L, T, T, nh)), np.zeros((L, T))
    mlp, mlp_res = np.zeros((L, T)), np.zeros((L, T))
    for l, block in enumerate(t.h):
        W = block.attn.c_attn.weight.double()  # Conv1D: (C, 3C)
        b = block.attn.c_attn.bias.double()
        v = (got[f"ln{l}"] @ W[:, 2 * C:] + b[2 * C:]).view(T, nh, hs)  # (T, nh, hs)
        W_O = block.attn.c_proj.weight.double().view(nh, hs, C)  # Conv1D: (in C, out C)
        u = torch.einsum("tnd,ndc->tnc", v, W_O)  # (T, nh, C)
        A = patterns[l][0].double()  # (nh, T, T)
        pre, mid = got[f"pre{l}"], got[f"pre{l}"] + got[f"attn{l}"]
        post = mid + got[f"mlp{l}"]
        for i in range(T):
            parts = (A[:, i, :].T[..., None] * u).reshape(T * nh, C)  # (T·nh, C) [source, head]
            s = shares(torch.cat([parts, pre[i][None]]), mid[i])
            attn[l, i] = s[:-1].view(T, nh).numpy()
            attn_res[l, i] = float(s[-1])
            m = shares(torch.stack([got[f"mlp{l}"][i], mid[i]]), post[i])
            mlp[l, i], mlp_res[l, i] = float(m[0]), float(m[1])
    return attn, attn_res, mlp, mlp_res


def test_shares_equal_hugging_face_gpt2(tmp_path):
    hf, ours = saved_pair(tmp_path)
    flow = gptcore.information_flow(ours, IDS)
    attn, attn_res, mlp, mlp_res = hf_flow(hf, IDS)
    assert flow.attn.shape == attn.shape == (3, len(IDS), len(IDS), 4)
    assert flow.attn.dtype == np.float32
    np.testing.assert_allclose(flow.attn, attn, atol=1e-5, rtol=0)
    np.testing.assert_allclose(flow.attn_residual, attn_res, atol=1e-5, rtol=0)
    np.testing.assert_allclose(flow.mlp, mlp, atol=1e-5, rtol=0)
    np.testing.assert_allclose(flow.mlp_residual, mlp_res, atol=1e-5, rtol=0)
    assert (flow.attn.max() > 0.05) and (flow.mlp.max() > 0.05)  # not all at the floor: the oracle has teeth
    np.testing.assert_array_equal(flow.tokens, IDS)


def test_shares_sum_to_one_and_future_sources_sit_at_the_floor(tmp_path):
    _, ours = saved_pair(tmp_path)
    flow = information_flow(ours, IDS)
    np.testing.assert_allclose(flow.attn.sum(axis=(2, 3)) + flow.attn_residual, 1.0, atol=1e-5)
    np.testing.assert_allclose(flow.mlp + flow.mlp_residual, 1.0, atol=1e-6)
    T = len(IDS)
    future = np.triu(np.ones((T, T), bool), 1)
    totals = flow.attn.sum(axis=(2, 3)) + flow.attn_residual  # all 1, yet the raw floor is the same in a row
    at_floor = flow.attn[:, future]  # (L, n_future, nh)
    assert at_floor.max() < 1e-3 and at_floor.min() > 0
    assert np.allclose(totals, 1.0, atol=1e-5)


def _bad_prompt_cases():
    return [([7], "at least 2 tokens"), ([], "empty")]


@pytest.mark.parametrize("ids, words", _bad_prompt_cases())
def test_bad_prompts_are_refused_with_the_fix(tmp_path, ids, words):
    _, ours = saved_pair(tmp_path)
    with pytest.raises(ValueError, match=words):
        information_flow(ours, ids)


def test_zero_layer_and_post_ln_models_are_refused():
    from types import SimpleNamespace

    no_layers = SimpleNamespace(config=SimpleNamespace(n_layer=0, ln_placement="pre", residual=True))  # GPTConfig refuses 0
    with pytest.raises(FlowError, match="0 layers"):
        information_flow(no_layers, [1, 2, 3])
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=1, n_head=2, n_embd=8, ln_placement="post")
    with pytest.raises(FlowError, match="pre-LN"):
        information_flow(GPT(cfg, seed=0), [1, 2, 3])


def plain_graph(flow, position: int, threshold: float):
    """The graph and route written out with loops and dicts, from the issue's words."""
    L, T, _, nh = flow.attn.shape
    w = {}

    def add(u, v, x):
        if x > 0:
            w[u, v] = w.get((u, v), 0.0) + x

    for l in range(L):
        for i in range(T):
            kept = {(j, h): float(flow.attn[l, i, j, h]) for j in range(T) for h in range(nh)
                    if flow.attn[l, i, j, h] > threshold}
            res = float(flow.attn_residual[l, i]) if flow.attn_residual[l, i] > threshold else 0.0
            total = sum(kept.values()) + res
            src = (lambda j: f"I{l - 1}_{j}") if l > 0 else (lambda j: f"X0_{j}")
            for (j, h), x in kept.items():
                add(src(j), f"A{l}_{i}", x / total)
            if res:
                add(src(i), f"A{l}_{i}", res / total)
            m = float(flow.mlp[l, i]) if flow.mlp[l, i] > threshold else 0.0
            r = float(flow.mlp_residual[l, i]) if flow.mlp_residual[l, i] > threshold else 0.0
            if m + r:
                add(f"A{l}_{i}", f"M{l}_{i}", m / (m + r))
                add(f"M{l}_{i}", f"I{l}_{i}", m / (m + r))
                add(f"A{l}_{i}", f"I{l}_{i}", r / (m + r))
    route, frontier = set(), [f"I{L - 1}_{position}"]
    reached = set(frontier)
    while frontier:
        node = frontier.pop()
        for (u, v), x in w.items():
            if v == node and x > threshold:
                route.add((u, v))
                if u not in reached:
                    reached.add(u)
                    frontier.append(u)
    return w, route


@pytest.mark.parametrize("position, threshold", [(-1, 0.04), (4, 0.02), (0, 0.1)])
def test_graph_equals_a_plain_python_builder(tmp_path, position, threshold):
    _, ours = saved_pair(tmp_path)
    flow = information_flow(ours, IDS)
    graph = gptcore.flow_graph(flow, position=position, threshold=threshold)
    want, want_route = plain_graph(flow, position % len(IDS), threshold)
    got = {(u, v): x for u, v, x in graph.edges}
    assert set(got) == set(want)
    for key, x in want.items():
        assert got[key] == pytest.approx(x, abs=1e-5)
    assert {(u, v) for u, v, _ in graph.route} == want_route
    assert len(want_route) > 3  # a real route, not an empty one
    assert graph.output_node in graph.route_nodes
    u, v, x = next(e for e in graph.route if e[1].startswith("A") and e[0] != f"I{int(e[1][1:].split('_')[0]) - 1}_{e[1].split('_')[1]}")
    assert graph.head_weights(u, v).sum() == pytest.approx(x, abs=1e-5)  # a j != i edge is its heads


def test_graph_refuses_bad_position_and_threshold(tmp_path):
    _, ours = saved_pair(tmp_path)
    flow = information_flow(ours, IDS)
    for bad in (len(IDS), -len(IDS) - 1):
        with pytest.raises(FlowError, match="outside the prompt"):
            gptcore.flow_graph(flow, position=bad)
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(FlowError, match="between 0 and 1"):
            gptcore.flow_graph(flow, threshold=bad)
    with pytest.raises(FlowError, match="not an attention edge"):
        gptcore.flow_graph(flow).head_weights("A0_1", "M0_1")


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablated_head_sits_at_the_floor_and_downstream_is_recomputed(tmp_path, mode):
    _, ours = saved_pair(tmp_path)
    clean = information_flow(ours, IDS)
    reference = None if mode == "zero" else [IDS[::-1], IDS[3:]]
    with gptcore.ablate(ours, heads=[(1, 2)], mode=mode, reference=reference):
        ablated = information_flow(ours, IDS)
    assert ablated.replaced_heads == ((1, 2),) and clean.replaced_heads == ()
    head = ablated.attn[1, :, :, 2]  # (T, T): in each row every source at the same floor value
    assert np.all(head < 1e-3) and np.all(np.ptp(head, axis=1) == 0)  # the ablated head at the floor ...
    assert clean.attn[1, :, :, 2].max() > 0.05  # ... where it was not before
    np.testing.assert_allclose(ablated.attn[0], clean.attn[0], atol=1e-6)  # upstream unchanged
    assert np.abs(ablated.attn[2] - clean.attn[2]).max() > 1e-3  # downstream recomputed


LLAMA = dict(pos_embedding="rope", norm="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False)


def llama_style(seed=0):
    cfg = GPTConfig(vocab_size=97, block_size=32, n_layer=3, n_head=4, n_embd=32, **LLAMA)
    model = GPT(cfg, seed=seed).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # away from the init's small values, so heads differ
        for p in model.parameters():
            p.add_(0.15 * torch.randn(p.shape, generator=gen))
    return model


@torch.no_grad()
def test_llama_style_model_equals_a_loop_over_single_parts():
    """Rotary, grouped-query (head h reads value head h // 2), RMSNorm, SwiGLU: each part built alone
    from the model's own hook points and its share written out, one part at a time."""
    model = llama_style()
    flow = information_flow(model, IDS)
    np.testing.assert_allclose(flow.attn.sum(axis=(2, 3)) + flow.attn_residual, 1.0, atol=1e-5)
    np.testing.assert_allclose(flow.mlp + flow.mlp_residual, 1.0, atol=1e-6)
    names = [f"blocks.{l}.{n}" for l in range(3) for n in
             ("hook_resid_pre", "attn.hook_v", "attn.hook_pattern", "hook_resid_mid")]
    _, cache = model.run_with_cache(torch.tensor([IDS]), names_filter=names, logits=None)
    T, nh, hs = len(IDS), 4, 8
    for l in range(3):
        W_O = model.blocks[l].attn.c_proj.weight.double()  # (C, C) nn.Linear: (out, in)
        A = cache[f"blocks.{l}.attn.hook_pattern"][0].double()  # (nh, T, T)
        v = cache[f"blocks.{l}.attn.hook_v"][0].double()  # (T, nkv, hs)
        pre, mid = (cache[f"blocks.{l}.hook_{n}"][0].double() for n in ("resid_pre", "resid_mid"))
        for i in (1, 6, T - 1):
            whole = mid[i]
            raw = np.zeros((T, nh))
            for j in range(T):
                for h in range(nh):
                    part = A[h, i, j] * (W_O[:, h * hs:(h + 1) * hs] @ v[j, h // 2])  # (C,)
                    raw[j, h] = max(float(whole.abs().sum() - (whole - part).abs().sum()), FLOOR)
            res = max(float(whole.abs().sum() - (whole - pre[i]).abs().sum()), FLOOR)
            total = raw.sum() + res
            np.testing.assert_allclose(flow.attn[l, i], raw / total, atol=1e-5)
            assert flow.attn_residual[l, i] == pytest.approx(res / total, abs=1e-5)
    assert flow.attn.max() > 0.05


def test_query_blocks_give_the_same_shares(tmp_path, monkeypatch):
    from gptcore.interp import flow as flow_module

    model = llama_style()
    whole = information_flow(model, IDS)
    monkeypatch.setattr(flow_module, "CHUNK_ELEMENTS", 1)  # one target row per block
    blocked = information_flow(model, IDS)
    np.testing.assert_allclose(blocked.attn, whole.attn, atol=1e-7)
    np.testing.assert_allclose(blocked.attn_residual, whole.attn_residual, atol=1e-7)


def test_the_flow_forwards_logits_are_the_models_and_leave_the_shares_alone():
    """`logits=True` (the Routes view's predictions without a second forward) gives what a plain
    forward gives, and the same shares as without it."""
    model = llama_style()
    plain = information_flow(model, IDS)
    with_logits = information_flow(model, IDS, logits=True)
    assert plain.logits is None
    with torch.no_grad():
        expected = model(torch.tensor([IDS]))[0]  # (T, V)
    assert with_logits.logits.shape == expected.shape
    torch.testing.assert_close(with_logits.logits, expected, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(with_logits.attn, plain.attn)
    np.testing.assert_array_equal(with_logits.mlp, plain.mlp)
