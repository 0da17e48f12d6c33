"""Issue 23: the book's model.pth does not record its head count, and loading it as 1 head
without a word gave logits 0.148 away from the real model. The loader now says where the
count came from, and refuses to guess when asked not to (the app), naming --n-head and the
counts that fit the width."""
from __future__ import annotations

import pytest
import torch

from gptcore.io.head_count import HeadCountNeeded, head_count_choices
from gptcore.io.loading import load

WIDTH, CTX, VOCAB, LAYERS = 96, 16, 50, 2


def book_state(seed: int = 0) -> dict:
    """A state dict under the book's GPTModel names (ch. 4), random values, width 96."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.2  # noqa: E731
    d = WIDTH
    state = {"tok_emb.weight": r(VOCAB, d), "pos_emb.weight": r(CTX, d), "final_norm.scale": 1 + r(d),
             "final_norm.shift": r(d), "out_head.weight": r(VOCAB, d)}
    for i in range(LAYERS):
        p = f"trf_blocks.{i}."
        state.update({p + "att.W_query.weight": r(d, d), p + "att.W_key.weight": r(d, d),
                      p + "att.W_value.weight": r(d, d), p + "att.out_proj.weight": r(d, d),
                      p + "att.out_proj.bias": r(d), p + "att.mask": torch.triu(torch.ones(CTX, CTX), 1),
                      p + "ff.layers.0.weight": r(4 * d, d), p + "ff.layers.0.bias": r(4 * d),
                      p + "ff.layers.2.weight": r(d, 4 * d), p + "ff.layers.2.bias": r(d),
                      p + "norm1.scale": 1 + r(d), p + "norm1.shift": r(d),
                      p + "norm2.scale": 1 + r(d), p + "norm2.shift": r(d)})
    return state


@pytest.fixture(params=["model.pth", "model_and_optimizer.pth"])
def book_file(request, tmp_path):
    path = tmp_path / request.param
    state = book_state()
    if request.param == "model.pth":
        torch.save(state, path)
    else:  # the book's resume-training dict
        torch.save({"model_state_dict": state, "optimizer_state_dict": {"state": {}, "param_groups": []}}, path)
    return path


def test_choices_are_the_divisors_of_the_width_likeliest_first():
    assert head_count_choices(768)[0] == 12 and head_count_choices(1600)[0] == 25  # GPT-2's own
    assert head_count_choices(256)[0] == 4  # 64-wide heads when 64 divides
    got = head_count_choices(96)
    assert sorted(got) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]
    assert got[:4] == [2, 1, 3, 4]  # head sizes 48, 96, 32, 24: nearest to 64 first


def test_the_app_is_asked_instead_of_a_guess(book_file):
    with pytest.raises(HeadCountNeeded) as raised:
        load(book_file, device="cpu")  # gptcore.load's default: never a guess (issue 27)
    exc = raised.value
    assert exc.n_embd == WIDTH and 4 in exc.choices and exc.choices == head_count_choices(WIDTH)
    message = str(exc)
    assert str(book_file) in message and "--n-head" in message and "does not record" in message
    assert "GPT_CONFIG_124M" in message and "12 heads at width 768" in message  # the book's defaults named


def test_a_given_count_is_used_and_said_to_be_given(book_file):
    model, info = load(book_file, n_head=4, guess_heads=False, device="cpu")
    assert model.config.n_head == 4 and info.heads == "given"
    assert "4 heads (given by the user" in info.describe()["shape"]
    one, guessed = load(book_file, guess_heads=True, device="cpu")  # only on request: a guess, said as such
    assert guessed.heads == "guessed" and one.config.n_head != 4
    assert any("head count not stored" in w for w in guessed.warnings)
    assert "guessed" in guessed.describe()["shape"]
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        assert not torch.allclose(model(ids), one(ids), atol=1e-3)  # the count matters: never silent


def test_files_that_record_the_count_are_unchanged(tmp_path):
    (tmp_path / "config.json").write_text('{"n_heads": 4}')  # the book's own key, next to the weights
    torch.save(book_state(), tmp_path / "model.pth")
    model, info = load(tmp_path / "model.pth", guess_heads=False, device="cpu")
    assert model.config.n_head == 4 and info.heads == "file" and "given" not in info.describe()["shape"]


def test_the_command_line_asks_for_n_head_instead_of_guessing(book_file, capsys):
    """`python -m gptcore info` on the book's model.pth: exit 2 with an error naming --n-head and
    the counts that fit (as the window's dialog offers them); with --n-head it describes the model."""
    from gptcore.__main__ import main

    assert main(["info", str(book_file), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--n-head" in err and "does not record" in err
    assert "2, 1, 3, 4" in err  # head_count_choices(96), likeliest first
    assert main(["info", str(book_file), "--device", "cpu", "--n-head", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 heads (given by the user" in out and "guessed" not in out
