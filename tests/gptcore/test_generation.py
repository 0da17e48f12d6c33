"""Streaming generation against the oracle (HF transformers on the same weights) and
against uncached recomputation of the very window the model saw."""
import pytest
import torch

from gptcore.model.config import GPTConfig
from gptcore.io.convert import from_hf_state_dict
from gptcore.generation.streaming import GenerationError, GenerationStep, generate
from gptcore.model.gpt import GPT
from gptcore.generation.sampling import next_token_distribution

PROMPT = [5, 17, 99, 3, 250, 8]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread; with several, a busy machine makes each
    op wait on its thread barrier (10x slower here). Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def hf_config(**overrides):
    from transformers import GPT2Config

    values = dict(vocab_size=500, n_positions=128, n_layer=2, n_head=4, n_embd=64, initializer_range=0.3,
                  bos_token_id=0, eos_token_id=1, attn_implementation="eager")
    values.update(overrides)
    return GPT2Config(**values)


@pytest.fixture(scope="module")
def pair():
    """(HF model, our model) holding the same random weights. A wide init (0.3) makes
    greedy decoding wander instead of repeating one token, so the comparison bites."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = hf_config()
    hf = GPT2LMHeadModel(cfg).eval()
    ours = from_hf_state_dict(hf.state_dict(), hf_config=cfg).eval()
    return hf, ours


@pytest.fixture(scope="module")
def small():
    """A tiny block_size so the window has to slide."""
    cfg = GPTConfig(vocab_size=300, block_size=16, n_layer=2, n_head=2, n_embd=32)
    model = GPT(cfg, seed=3).eval()
    with torch.no_grad():  # wider weights: varied greedy choices
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(10)
    return model


def tokens(steps):
    return [s.token for s in steps]


def test_greedy_equals_hf_generate_for_64_tokens(pair):
    hf, ours = pair
    ids = torch.tensor([PROMPT])
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=64,
                      min_new_tokens=0, pad_token_id=0, eos_token_id=None)
    ref = out[0, len(PROMPT):].tolist()
    mine = tokens(generate(ours, PROMPT, max_new_tokens=64, temperature=0))
    assert len(ref) == 64 and len(set(ref)) > 10  # a real sequence, not one token repeated
    assert mine == ref


def test_greedy_with_repetition_penalty_equals_hf(pair):
    hf, ours = pair
    ids = torch.tensor([PROMPT])
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=32,
                      repetition_penalty=1.8, pad_token_id=0, eos_token_id=None)
    mine = tokens(generate(ours, PROMPT, max_new_tokens=32, temperature=0, repetition_penalty=1.8))
    assert mine == out[0, len(PROMPT):].tolist()
    assert mine != tokens(generate(ours, PROMPT, max_new_tokens=32, temperature=0))


def test_cached_logits_equal_uncached(pair):
    _, model = pair
    seq = torch.randint(0, 500, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(seq)  # (1, 40, V), no cache
        cache = model.new_kv_cache(1)
        pieces = [model(seq[:, :10], kv_cache=cache)]  # a prefill
        pieces += [model(seq[:, t:t + 1], kv_cache=cache) for t in range(10, 30)]  # one at a time
        pieces.append(model(seq[:, 30:], kv_cache=cache))  # a chunk after a past
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-4)
    assert cache.length == 40


def test_step_probabilities_equal_next_token_distribution_of_an_uncached_forward(pair):
    """What generate reports is what the GUI's bars show for the same prefix."""
    _, model = pair
    settings = dict(temperature=0.9, top_k=40, top_p=0.9, repetition_penalty=1.2)
    steps = list(generate(model, PROMPT, max_new_tokens=12, seed=7, n_alternatives=5, **settings))
    seq = PROMPT + tokens(steps)
    for i, step in enumerate(steps):
        prefix = seq[:len(PROMPT) + i]
        assert step.position == len(prefix)
        with torch.no_grad():
            logits = model(torch.tensor([prefix]))[0, -1]
        probs = next_token_distribution(logits, context=prefix, **settings)
        assert step.prob == pytest.approx(float(probs[step.token]), abs=1e-4)
        values, ids = torch.topk(probs, 5)
        top5 = [t for t, p in zip(ids.tolist(), values.tolist()) if p > 0]
        expected = top5 if step.token in top5 else top5[:4] + [step.token]  # a long-tail draw shows too
        assert [t for t, _ in step.alternatives] == [int(t) for t in expected]
        assert step.token in dict(step.alternatives)


def test_same_seed_same_tokens_and_another_seed_differs(pair):
    _, model = pair
    run = lambda seed: tokens(generate(model, PROMPT, max_new_tokens=30, temperature=1.5, seed=seed))
    assert run(11) == run(11)
    assert run(11) != run(12)


def test_top_k_one_equals_greedy_equals_temperature_zero(pair):
    _, model = pair
    greedy = tokens(generate(model, PROMPT, max_new_tokens=24, temperature=0))
    assert tokens(generate(model, PROMPT, max_new_tokens=24, temperature=1.0, top_k=1, seed=5)) == greedy
    assert tokens(generate(model, PROMPT, max_new_tokens=24, temperature=3.0, top_k=1, seed=9)) == greedy


def _window_policy_logits(model, history_len_prompt, seq, shift):
    """Logits for each generated position recomputed WITHOUT a cache, on the window the
    documented policy gives: the last block_size tokens of the prompt, and when full,
    only the newest block_size - shift tokens."""
    block = model.config.block_size
    start = max(0, history_len_prompt - block)
    out = []
    for pos in range(history_len_prompt, len(seq)):
        if pos - start > block:
            start = pos - max(1, block - shift)
        with torch.no_grad():
            out.append(model(torch.tensor([seq[start:pos]]))[0, -1])
    return out


@pytest.mark.parametrize("shift", [1, 5, 16])
def test_sliding_window_keeps_going_and_equals_uncached_recompute(small, shift):
    block = small.config.block_size
    steps = list(generate(small, PROMPT, max_new_tokens=3 * block, temperature=0, window_shift=shift))
    assert len(steps) == 3 * block  # never fails on length
    seq = PROMPT + tokens(steps)
    for step, logits in zip(steps, _window_policy_logits(small, len(PROMPT), seq, shift)):
        assert step.token == int(logits.argmax())
    # sampling too: the reported probability is the uncached window's
    steps = list(generate(small, PROMPT, max_new_tokens=2 * block, temperature=1.0, seed=2, window_shift=shift))
    seq = PROMPT + tokens(steps)
    for step, logits in zip(steps, _window_policy_logits(small, len(PROMPT), seq, shift)):
        assert step.prob == pytest.approx(float(torch.softmax(logits, -1)[step.token]), abs=1e-4)


def test_a_prompt_longer_than_the_block_is_cropped_to_its_end(small):
    block = small.config.block_size
    long_prompt = list(range(1, 3 * block + 2))
    greedy = tokens(generate(small, long_prompt, max_new_tokens=4, temperature=0))
    assert greedy[0] == int(small(torch.tensor([long_prompt[-block:]]))[0, -1].argmax())
    assert len(greedy) == 4


def test_padded_vocab_ids_are_never_sampled():
    cfg = GPTConfig(vocab_size=50304, block_size=32, n_layer=1, n_head=2, n_embd=16)
    model = GPT(cfg, seed=0).eval()
    with torch.no_grad():
        model.ln_final.bias.fill_(1.0)
        model.unembed.weight[50257:] = 5.0  # the padding would win every draw
    drawn = tokens(generate(model, [1, 2, 3], max_new_tokens=20, temperature=2.0, seed=0))
    assert all(t < 50257 for t in drawn)
    assert all(t < 50257 for t in tokens(generate(model, [1], max_new_tokens=3, temperature=0)))
    # the same model without the limit does draw padding: the test above can fail
    unlimited = tokens(generate(model, [1, 2, 3], max_new_tokens=5, temperature=2.0, seed=0, vocab_limit=50304))
    assert any(t >= 50257 for t in unlimited)


def test_explicit_vocab_limit(small):
    drawn = tokens(generate(small, PROMPT, max_new_tokens=40, temperature=5.0, seed=1, vocab_limit=20))
    assert max(drawn) < 20
    with pytest.raises(ValueError, match="vocab_limit"):
        generate(small, PROMPT, max_new_tokens=1, vocab_limit=301)


def test_nan_weights_raise_a_clear_error_not_garbage():
    model = GPT(GPTConfig(vocab_size=100, block_size=16, n_layer=1, n_head=2, n_embd=16), seed=0).eval()
    with torch.no_grad():
        model.blocks[0].mlp.c_fc.weight[0, 0] = float("nan")
    for temperature in (0, 1.0):
        stream = generate(model, [1, 2], max_new_tokens=5, temperature=temperature, seed=0)
        with pytest.raises(GenerationError, match="NaN or infinite logits at position 2"):
            next(stream)


def test_cancel_stops_before_the_next_forward(small):
    calls = []
    forwards = []
    handle = small.register_forward_hook(lambda *a: forwards.append(1))
    try:
        steps = list(generate(small, PROMPT, max_new_tokens=50, temperature=0,
                              cancel=lambda: len(calls.append(1) or calls) > 3))
        assert len(steps) == 3 and len(forwards) == 3
        assert list(generate(small, PROMPT, max_new_tokens=50, cancel=lambda: True)) == []
        assert len(forwards) == 3  # cancelled before the prefill: no work at all
    finally:
        handle.remove()


def test_abandoning_the_stream_leaves_the_caller_state_alone(small):
    small.train()
    try:
        stream = generate(small, PROMPT, max_new_tokens=100, temperature=0)
        first = next(stream)
        assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        assert small.training  # eval only inside each step (no dropout while generating)
        next(stream)
        del stream  # abandoned midway
        assert torch.is_grad_enabled() and small.training
        assert isinstance(first, GenerationStep) and first.position == len(PROMPT)
    finally:
        small.eval()


def test_stop_at_eos_yields_the_eos_then_stops(small):
    greedy = tokens(generate(small, PROMPT, max_new_tokens=20, temperature=0))
    eos = greedy[4]
    stop = greedy.index(eos)
    stopped = tokens(generate(small, PROMPT, max_new_tokens=20, temperature=0, stop_at_eos=True, eos_id=eos))
    assert stopped == greedy[:stop + 1]
    assert tokens(generate(small, PROMPT, max_new_tokens=20, temperature=0, eos_id=eos)) == greedy  # off by default


def test_prompt_forms_agree_and_bad_prompts_are_refused(small):
    as_list = tokens(generate(small, PROMPT, max_new_tokens=5, temperature=0))
    assert tokens(generate(small, torch.tensor(PROMPT), max_new_tokens=5, temperature=0)) == as_list
    assert tokens(generate(small, torch.tensor([PROMPT]), max_new_tokens=5, temperature=0)) == as_list
    for bad, fragment in [([], "empty"), ([1, 300], r"\[0, 300\)"), ([-1], r"\[0, 300\)"),
                          (torch.zeros(2, 3, dtype=torch.long), "one sequence"),
                          (torch.tensor([1.0, 2.0]), "integers"), ([1.5], "whole numbers")]:
        with pytest.raises(ValueError, match=fragment):
            generate(small, bad, max_new_tokens=1)


def test_bad_settings_raise_at_the_call_not_at_the_first_step(small):
    with pytest.raises(ValueError, match="top_p"):
        generate(small, PROMPT, max_new_tokens=3, top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        generate(small, PROMPT, max_new_tokens=3, temperature=float("nan"))
    with pytest.raises(ValueError, match="n_alternatives"):
        generate(small, PROMPT, max_new_tokens=3, n_alternatives=-1)
    with pytest.raises(ValueError, match="window_shift"):
        generate(small, PROMPT, max_new_tokens=3, window_shift=0)
    assert list(generate(small, PROMPT, max_new_tokens=0)) == []


def test_alternatives_follow_the_transforms(small):
    steps = list(generate(small, PROMPT, max_new_tokens=10, temperature=1.0, top_k=3, seed=4))
    for step in steps:
        assert 1 <= len(step.alternatives) <= 3
        assert step.token in dict(step.alternatives)
        assert dict(step.alternatives)[step.token] == pytest.approx(step.prob)
    for step in generate(small, PROMPT, max_new_tokens=5, temperature=0):
        assert step.prob == 1.0 and step.alternatives == ((step.token, 1.0),)
    long_tail = list(generate(small, PROMPT, max_new_tokens=60, temperature=50.0, seed=0, n_alternatives=2))
    assert all(len(s.alternatives) == 2 and s.token in dict(s.alternatives) for s in long_tail)


# -- the command line: `python -m gptcore generate` ------------------------------------------

@pytest.fixture(scope="module")
def gpt2_vocab_folder(tmp_path_factory):
    """A tiny HF checkpoint with GPT-2's real vocabulary, so the real tokenizer applies."""
    from transformers import GPT2LMHeadModel

    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    cfg = hf_config(vocab_size=50257, n_positions=64, n_layer=1, n_head=2, n_embd=16, eos_token_id=50256,
                    bos_token_id=50256)
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    return folder


def test_cli_generate_streams_the_greedy_continuation(gpt2_vocab_folder, capsys):
    from gptcore.__main__ import main
    from gptcore.io.loading import load
    from gptcore.io.tokenizer import gpt2_tokenizer

    rc = main(["generate", "--model", str(gpt2_vocab_folder), "--prompt", "Every effort moves you",
               "--max-new-tokens", "8", "--temperature", "0", "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0
    tok = gpt2_tokenizer()
    model, _ = load(str(gpt2_vocab_folder), device="cpu")
    expected = tokens(generate(model, tok.encode("Every effort moves you"), max_new_tokens=8, temperature=0))
    assert out == "Every effort moves you" + tok.decode(expected) + "\n"


@pytest.mark.parametrize("flag, value, fragment", [
    ("--temperature", "nan", "temperature must be a number from 0 (greedy) to 100"),
    ("--temperature", "-1", "temperature must be a number from 0 (greedy) to 100"),
    ("--temperature", "inf", "temperature must be a number from 0 (greedy) to 100"),
    ("--temperature", "1e12", "temperature must be a number from 0 (greedy) to 100"),
    ("--top-p", "0", "top_p must be in (0, 1]"),
    ("--top-p", "nan", "top_p must be in (0, 1]"),
    ("--top-p", "7", "top_p must be in (0, 1]"),
    ("--top-k", "-5", "top_k must be a whole number >= 0"),
    ("--repetition-penalty", "0", "repetition_penalty must be in (0, 100]"),
    ("--repetition-penalty", "-inf", "repetition_penalty must be in (0, 100]"),
    ("--max-new-tokens", "-3", "max_new_tokens must be a whole number from 0 to 1,000,000"),
    ("--max-new-tokens", "99999999999", "max_new_tokens must be a whole number from 0 to 1,000,000"),
])
def test_fault_cli_generation_settings_exit_nonzero_with_the_allowed_range(gpt2_vocab_folder, capsys, flag, value, fragment):
    from gptcore.__main__ import main

    rc = main(["generate", "--model", str(gpt2_vocab_folder), "--prompt", "Hi", "--device", "cpu", f"{flag}={value}"])
    captured = capsys.readouterr()
    assert rc != 0
    assert fragment in captured.err and "Traceback" not in captured.err
    assert captured.out == ""  # nothing generated, not even the prompt echoed


def test_fault_cli_settings_are_checked_before_the_model_is_loaded(tmp_path, capsys):
    from gptcore.__main__ import main

    rc = main(["generate", "--model", str(tmp_path / "no-such-model"), "--temperature", "nan"])
    err = capsys.readouterr().err
    assert rc != 0 and "temperature" in err and "no-such-model" not in err


def test_decode_head_fast_path_equals_the_plain_head_and_follows_weight_edits():
    """Without autograd the CPU head runs through oneDNN (gptcore.model.gpt.apply_linear); it must
    give the plain nn.Linear head's logits and read the live (tied) weight, edits included."""
    model = GPT(GPTConfig(vocab_size=400, block_size=32, n_layer=1, n_head=2, n_embd=32), seed=0).eval()
    x = torch.tensor([[4, 9, 1]])

    def both():
        with torch.inference_mode():
            fast = model(x, logits="last")  # one row, no autograd: the fast path
        plain = model(x, logits="last")  # grad mode: the nn.Linear itself
        return fast, plain

    fast, plain = both()
    assert torch.allclose(fast, plain, atol=1e-5)
    with torch.no_grad():
        model.embed.weight[7] += torch.linspace(0, 3, 32)  # tied: the head row 7 changes too
    fast2, plain2 = both()
    assert torch.allclose(fast2, plain2, atol=1e-5)
    assert abs(float(fast2[0, 0, 7] - fast[0, 0, 7])) > 1e-2  # the edit shows in the fast path
