"""Decoding with CUDA graphs (issue 37) on the device: the captured step against HF's generate and
against the same step run eagerly, kept per shape and captured once, following weights edited in
place and capturing again for replaced ones, never replaying under a hook, one stream at a time.
Marked `cuda`; skipped where torch sees no GPU (run them with `pytest -m cuda`). The static step's
equality with the plain path is tested on the CPU in test_static_decode.py."""
from __future__ import annotations

import pytest
import torch

from gptcore.generation import decode_graphs
from gptcore.generation.streaming import generate
from gptcore.io.convert import from_hf_state_dict
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")]

CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def hf_pair():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_cfg = transformers.GPT2Config(vocab_size=300, n_positions=64, n_embd=64, n_layer=3, n_head=4,
                                     initializer_range=0.3, attn_implementation="eager")
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    ours = from_hf_state_dict(hf.state_dict(), hf_config=hf_cfg).eval()
    return hf.to(CUDA), ours.to(CUDA)


def _graph_tokens(model, prompt, **kwargs):
    steps = list(generate(model, prompt, engine="graph", **kwargs))
    return [s.token for s in steps], steps


def test_graph_decoding_equals_hf_generate_and_is_captured_once(hf_pair):
    hf, ours = hf_pair
    decode_graphs.forget(ours)
    prompt = [1, 2, 3, 4]
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt], device=CUDA), do_sample=False, max_new_tokens=40, min_new_tokens=40,
                          pad_token_id=0, eos_token_id=None, attention_mask=torch.ones(1, 4, device=CUDA, dtype=torch.long))
    first, steps = _graph_tokens(ours, prompt, max_new_tokens=40, temperature=0)
    assert len(set(first)) > 10  # a real sequence, not one token repeated
    assert first == ref[0, 4:].tolist()
    assert steps[0].capture_s > 0 and all(s.capture_s == 0 for s in steps[1:])  # said with the first token
    again, steps = _graph_tokens(ours, prompt, max_new_tokens=40, temperature=0)
    assert again == first and all(s.capture_s == 0 for s in steps)  # kept for the next generation


@pytest.mark.parametrize("overrides", [dict(), dict(pos_embedding="rope", n_kv_head=2, norm="rmsnorm", mlp="swiglu")])
def test_graph_sampling_equals_the_eager_static_step_across_the_window_slide(overrides):
    """Seeded sampling with every transform: the replayed graphs draw what the same step run eagerly
    draws (one generator algorithm, its state moved on by each replay), through two window slides."""
    cfg = GPTConfig(vocab_size=97, block_size=32, n_layer=2, n_head=4, n_embd=64, **overrides)
    model = GPT(cfg, seed=5).eval().to(CUDA)
    decode_graphs.forget(model)
    settings = dict(max_new_tokens=90, temperature=0.9, top_k=30, top_p=0.9, repetition_penalty=1.3, seed=3,
                    n_alternatives=5)
    graph, graph_steps = _graph_tokens(model, [4, 8, 15], **settings)
    eager = list(generate(model, [4, 8, 15], engine="static", **settings))
    assert graph == [s.token for s in eager]
    for a, b in zip(graph_steps, eager):
        assert a.prob == pytest.approx(b.prob, abs=1e-5)
        assert [t for t, _ in a.alternatives] == [t for t, _ in b.alternatives]
    plain = list(generate(model, [4, 8, 15], engine="plain", max_new_tokens=90, temperature=0))
    assert _graph_tokens(model, [4, 8, 15], max_new_tokens=90, temperature=0)[0] == [s.token for s in plain]


def test_graphs_read_weights_edited_in_place_and_recapture_for_replaced_ones():
    cfg = GPTConfig(vocab_size=97, block_size=48, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg, seed=6).eval().to(CUDA)
    decode_graphs.forget(model)
    prompt = [3, 1, 4, 1, 5]
    plain = lambda: [s.token for s in generate(model, prompt, engine="plain", max_new_tokens=30, temperature=0)]
    tokens, _ = _graph_tokens(model, prompt, max_new_tokens=30, temperature=0)
    assert tokens == plain()
    with torch.no_grad():
        model.blocks[0].mlp.c_fc.weight.mul_(-3)  # in place: the captured graph reads it
    tokens, steps = _graph_tokens(model, prompt, max_new_tokens=30, temperature=0)
    assert steps[0].capture_s == 0 and tokens == plain()
    fresh = {k: torch.randn_like(v) * 0.2 for k, v in model.state_dict().items()}
    model.load_state_dict(fresh, assign=True)  # new tensors: the old capture must not replay
    tokens, steps = _graph_tokens(model, prompt, max_new_tokens=30, temperature=0)
    assert steps[0].capture_s > 0 and tokens == plain()


def test_a_hooked_model_never_replays_a_graph_captured_without_the_hook():
    cfg = GPTConfig(vocab_size=97, block_size=48, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg, seed=7).eval().to(CUDA)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(0.5 * torch.randn_like(p))
    decode_graphs.forget(model)
    prompt = [9, 2, 6]

    def knock_out_head_0(z, hook):  # (B, T, nh, hs)
        z = z.clone()
        z[:, :, 0] = 0
        return z

    def run(engine):
        stream = generate(model, prompt, max_new_tokens=20, temperature=0, engine=engine)
        got = [next(stream).token for _ in range(5)]
        with model.hooks([("blocks.0.attn.hook_z", knock_out_head_0)]):
            got += [next(stream).token for _ in range(5)]
        return got + [s.token for s in stream]

    assert run("graph") == run("plain")
    greedy = lambda engine: [s.token for s in generate(model, prompt, max_new_tokens=20, temperature=0, engine=engine)]
    decode_graphs.forget(model)
    with model.hooks([("blocks.0.attn.hook_z", knock_out_head_0)]):  # hooked from the start: nothing is captured
        assert greedy("graph") == greedy("plain")
    unhooked = greedy("plain")
    assert greedy("graph") == unhooked  # captured now, without the hook: the ablation is not in it
    with model.hooks([("blocks.0.attn.hook_z", knock_out_head_0)]):
        assert greedy("graph") == greedy("plain") != unhooked


def test_two_streams_on_one_model_each_get_their_own_tokens():
    """The captured step (and its KV cache) serves one generation at a time; a second stream
    interleaved with the first runs the plain path, and neither disturbs the other."""
    cfg = GPTConfig(vocab_size=97, block_size=48, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg, seed=8).eval().to(CUDA)
    decode_graphs.forget(model)
    a = generate(model, [1, 2, 3], max_new_tokens=25, temperature=0, engine="graph")
    b = generate(model, [7, 7], max_new_tokens=25, temperature=0, engine="graph")
    got_a, got_b = [], []
    for sa, sb in zip(a, b):
        got_a.append(sa.token)
        got_b.append(sb.token)
    assert got_a == [s.token for s in generate(model, [1, 2, 3], max_new_tokens=25, temperature=0, engine="plain")]
    assert got_b == [s.token for s in generate(model, [7, 7], max_new_tokens=25, temperature=0, engine="plain")]
