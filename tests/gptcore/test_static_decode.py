"""The static-shape decode step (what CUDA graphs replay) against the plain KV-cached path it stands
in for, on the CPU where the step runs eagerly: the same logits per step, the same tokens and
reported probabilities for greedy and seeded sampling, across the window's slide, on GPT-2's parts
and the modern ones; and HF transformers' generate as the oracle for greedy tokens. The device-side
pick against torch.multinomial and the transforms it replaces. The graph path itself is in
test_cuda.py (CUDA only)."""
import logging

import pytest
import torch

from gptcore.generation import decode_graphs
from gptcore.generation.picking import TokenPicker
from gptcore.generation.sampling import next_token_distribution, top_alternatives, transformed_logits
from gptcore.generation.streaming import generate
from gptcore.io.convert import from_hf_state_dict
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT
from gptcore.model.kv_cache import StaticKVCache

PROMPT = [5, 17, 9, 3, 25, 8]
VARIANTS = [
    dict(),  # GPT-2: learned positions, LayerNorm, GELU MLP
    dict(pos_embedding="sinusoidal"),
    dict(pos_embedding="rope", n_kv_head=2, norm="rmsnorm", mlp="swiglu"),
    dict(pos_embedding="rope", n_kv_head=1, ln_placement="post"),
]
SAMPLING = dict(temperature=0.9, top_k=20, top_p=0.9, repetition_penalty=1.3)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(block_size=16, seed=3, **overrides):
    """A small model with wide weights (std 0.5), so greedy decoding wanders instead of repeating one token."""
    cfg = GPTConfig(vocab_size=60, block_size=block_size, n_layer=2, n_head=4, n_embd=32, **overrides)
    model = GPT(cfg, seed=seed).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return model


def _steps(model, **kwargs):
    return list(generate(model, PROMPT, **kwargs))


@pytest.mark.parametrize("overrides", VARIANTS)
def test_static_steps_give_the_plain_steps_logits(overrides):
    """One token at a time through a StaticKVCache (the position on the device, the whole block under
    a mask) against the same tokens through the plain KVCache, after a prefill both share."""
    model = _model(**overrides)
    seq = torch.randint(0, 60, (2, 16), generator=torch.Generator().manual_seed(4))  # (B, T): fills the block
    with torch.no_grad():
        plain = model.new_kv_cache(2)
        base = model.new_kv_cache(2, zeroed=True)
        model(seq[:, :5], kv_cache=plain)
        model(seq[:, :5], kv_cache=base)
        static = StaticKVCache(base)
        for t in range(5, 16):
            want = model(seq[:, t:t + 1], kv_cache=plain, logits="last")  # (2, 1, V)
            static.position.fill_(t)
            got = model(seq[:, t:t + 1], kv_cache=static, logits="last")
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
        assert base.length == 5  # the static view never moves the plain length: its owner does
        torch.testing.assert_close(base.k, plain.k, atol=1e-5, rtol=1e-5)  # every slot written where the plain path writes


@pytest.mark.parametrize("overrides", VARIANTS)
def test_static_engine_generates_the_plain_engines_tokens_across_the_window_slide(overrides):
    """48 tokens from a 16-token block: the window slides twice; greedy and seeded sampling with every
    transform on. Same tokens, same reported probabilities and alternatives."""
    model = _model(**overrides)
    for settings in (dict(temperature=0), dict(SAMPLING, seed=11), dict(temperature=1.4, seed=5)):
        plain = _steps(model, max_new_tokens=48, engine="plain", n_alternatives=4, **settings)
        static = _steps(model, max_new_tokens=48, engine="static", n_alternatives=4, **settings)
        assert [s.token for s in static] == [s.token for s in plain], settings
        assert len({s.token for s in plain}) > 3  # a real sequence, not one token repeated
        for a, b in zip(static, plain):
            assert a.position == b.position and a.prob == pytest.approx(b.prob, abs=1e-5)
            assert [t for t, _ in a.alternatives] == [t for t, _ in b.alternatives]


@pytest.mark.parametrize("overrides", [VARIANTS[0], VARIANTS[2]])
def test_static_engine_in_bf16_generates_the_plain_engines_tokens(overrides):
    """The additive mask is made in the model's dtype: a bf16 model decodes the same either way."""
    model = _model(**overrides).to(torch.bfloat16)
    plain = [s.token for s in _steps(model, max_new_tokens=40, temperature=0, engine="plain")]
    assert [s.token for s in _steps(model, max_new_tokens=40, temperature=0, engine="static")] == plain


@pytest.mark.parametrize("shift", [1, 5])
def test_static_engine_equals_an_uncached_recompute_of_the_documented_window(shift):
    """Oracle without any cache: each generated token is the argmax of a full forward over the window
    the policy gives (the last block_size tokens; when full, only the newest block_size - shift)."""
    model = _model()
    steps = _steps(model, max_new_tokens=40, temperature=0, window_shift=shift, engine="static")
    seq = PROMPT + [s.token for s in steps]
    block, start = model.config.block_size, 0
    for pos, step in zip(range(len(PROMPT), len(seq)), steps):
        if pos - start > block:
            start = pos - max(1, block - shift)
        with torch.no_grad():
            logits = model(torch.tensor([seq[start:pos]]))[0, -1]
        assert step.token == int(logits.argmax())


def test_static_greedy_equals_hf_generate():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=500, n_positions=128, n_layer=2, n_head=4, n_embd=64,
                                  initializer_range=0.3, bos_token_id=0, eos_token_id=1, attn_implementation="eager")
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    ours = from_hf_state_dict(hf.state_dict(), hf_config=cfg).eval()
    ids = torch.tensor([PROMPT])
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=64, min_new_tokens=0,
                      pad_token_id=0, eos_token_id=None)
    ref = out[0, len(PROMPT):].tolist()
    assert len(set(ref)) > 10
    assert [s.token for s in generate(ours, PROMPT, max_new_tokens=64, temperature=0, engine="static")] == ref


def test_a_hook_attached_mid_stream_takes_the_plain_path_for_its_steps():
    """A hook sees the plain path's shapes (the pattern over the filled keys, not the whole block) and
    its effect shows in the tokens: the same as the plain engine with the same hook from the same step."""
    model = _model(block_size=32)
    seen_shapes = []

    def knock_out_head_0(z, hook):  # (B, T, nh, hs): an ablation as the app applies it, through a hook point
        z = z.clone()
        z[:, :, 0] = 0
        return z

    def run(engine):
        stream = generate(model, PROMPT, max_new_tokens=12, temperature=0, engine=engine)
        got = [next(stream).token for _ in range(4)]
        with model.hooks([("blocks.0.attn.hook_z", knock_out_head_0),
                          ("blocks.1.attn.hook_pattern", lambda p, h: seen_shapes.append(tuple(p.shape)))]):
            got += [next(stream).token for _ in range(4)]
        got += [s.token for s in stream]
        return got

    plain, static = run("plain"), run("static")
    assert static == plain
    assert seen_shapes[:4] == [(1, 4, 1, len(PROMPT) + 4 + i) for i in range(4)]  # keys filled so far, not 32
    unhooked = [s.token for s in generate(model, PROMPT, max_new_tokens=12, temperature=0, engine="static")]
    assert unhooked != static  # the hook changed what was generated


def test_graph_engine_without_cuda_says_why_and_decodes_on_the_plain_path(caplog):
    model = _model()
    with pytest.raises(decode_graphs.GraphsUnavailable, match="CUDA"):
        decode_graphs.acquire(model)
    with caplog.at_level(logging.INFO, logger="gptcore.generation.streaming"):
        graph = _steps(model, max_new_tokens=20, temperature=0, engine="graph")
    assert "without CUDA graphs" in caplog.text and "cpu" in caplog.text
    assert [s.token for s in graph] == [s.token for s in _steps(model, max_new_tokens=20, temperature=0)]
    assert all(s.capture_s == 0.0 for s in graph)


def test_an_unknown_engine_is_refused_at_the_call():
    with pytest.raises(ValueError, match="engine must be one of"):
        generate(_model(), PROMPT, max_new_tokens=3, engine="fast")


# -- the pick on the device --------------------------------------------------------------------------
def _reference_step(logits, generator, seen, n, **settings):
    """The choice as streaming.py made it before the pick moved to the device: the shared transforms,
    softmax, torch.multinomial, top_alternatives, a long-tail draw appended."""
    x = transformed_logits(logits, seen=seen, vocab_limit=None, **settings)
    probs = torch.softmax(x, dim=-1)
    token = int(torch.multinomial(probs, 1, generator=generator))
    alternatives = top_alternatives(probs, n)
    if n and all(t != token for t, _ in alternatives):
        alternatives = alternatives[: n - 1] + ((token, float(probs[token])),)
    return token, float(probs[token]), alternatives


@pytest.mark.parametrize("settings", [dict(temperature=1.0, top_k=None, top_p=None, repetition_penalty=1.0),
                                      dict(temperature=0.7, top_k=12, top_p=0.8, repetition_penalty=1.5),
                                      dict(temperature=2.5, top_k=None, top_p=0.95, repetition_penalty=0.8)])
def test_the_device_pick_draws_what_multinomial_draws_with_the_same_generator(settings):
    V, n, context = 300, 6, [3, 3, 40, 299]
    picker = TokenPicker(vocab_limit=V, n_alternatives=n, vocab_size=V, device="cpu", **settings)
    picker.begin(context, seed=21)
    generator = torch.Generator().manual_seed(21)
    history = list(context)
    g = torch.Generator().manual_seed(0)
    for position in range(60):
        logits = torch.randn(V, generator=g) * 3
        seen = torch.zeros(V, dtype=torch.bool)
        seen[torch.tensor(history)] = True
        want = _reference_step(logits, generator, seen, n, **settings)
        got = picker.read(picker.pick(logits).tolist(), position)
        assert got[0] == want[0] and got[1] == pytest.approx(want[1], rel=1e-6)
        assert [t for t, _ in got[2]] == [t for t, _ in want[2]]
        history.append(got[0])


def test_the_greedy_pick_is_the_argmax_after_the_penalty_and_reports_certainty():
    V = 50
    picker = TokenPicker(temperature=0, top_k=None, top_p=None, repetition_penalty=3.0, vocab_limit=40,
                         n_alternatives=3, vocab_size=V, device="cpu")
    picker.begin([7], seed=None)
    logits = torch.zeros(V)
    logits[7], logits[9], logits[45] = 5.0, 4.0, 9.0  # 45 lies past the vocab limit: never drawn
    token, prob, alternatives = picker.read(picker.pick(logits).tolist(), position=1)
    assert (token, prob, alternatives) == (9, 1.0, ((9, 1.0),))  # 7 penalised to 5/3
    probs = next_token_distribution(logits, temperature=0, repetition_penalty=3.0, context=[7], vocab_limit=40)
    assert int(probs.argmax()) == token
    token2, _, _ = picker.read(picker.pick(logits).tolist(), position=2)
    assert token2 == 7  # 9 is now seen too (5/3 for both: the first of equal maxima)


def test_the_pick_reports_nan_logits_at_their_position():
    from gptcore.generation.sampling import GenerationError

    picker = TokenPicker(temperature=1.0, top_k=None, top_p=None, repetition_penalty=1.0, vocab_limit=10,
                         n_alternatives=2, vocab_size=10, device="cpu")
    picker.begin([1], seed=0)
    logits = torch.zeros(10)
    logits[3] = float("nan")
    with pytest.raises(GenerationError, match="position 12"):
        picker.read(picker.pick(logits).tolist(), position=12)
