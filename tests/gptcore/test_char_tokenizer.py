"""A training run's character vocabulary is the tokenizer of its checkpoints (gptcore/char_tokenizer.py)."""
from __future__ import annotations

import json

import pytest

from gptcore.io.char_tokenizer import CHAR_VOCAB_FORMAT, CharTokenizer, find_char_vocab
from gptcore.io.folder_tokenizer import choose_tokenizer, load_tokenizer


def _vocab(folder, chars=("\n", " ", "a", "b", "c")):
    path = folder / "char_vocab.json"
    path.write_text(json.dumps({"format": CHAR_VOCAB_FORMAT, "tokenizer": "char", "vocab_size": len(chars),
                                "chars": list(chars)}), encoding="utf-8")
    return path


def test_round_trip_and_ids_follow_the_saved_order(tmp_path):
    tok = CharTokenizer.from_file(_vocab(tmp_path))
    assert tok.n_vocab == 5
    assert tok.encode("ab c\n") == [2, 3, 1, 4, 0]
    assert tok.decode([2, 3, 1, 4, 0]) == "ab c\n"
    assert tok.token_str(4) == "c" and tok.token_bytes(2) == b"a"
    assert tok.eot_token is None
    assert "id 7" in tok.token_str(7)  # a padded vocab_size: ids past the alphabet are shown, not a crash


def test_a_character_outside_the_vocabulary_is_named(tmp_path):
    tok = CharTokenizer.from_file(_vocab(tmp_path))
    with pytest.raises(ValueError, match=r"'xz'.*not in this model's character vocabulary of 5"):
        tok.encode("abxz")


def test_a_file_that_is_not_a_vocabulary_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "char_vocab.json"
    bad.write_text(json.dumps({"chars": ["a"]}), encoding="utf-8")
    with pytest.raises(ValueError, match="not a gptcore character vocabulary"):
        CharTokenizer.from_file(bad)


def test_a_run_checkpoint_and_a_kept_step_get_the_runs_characters(tmp_path):
    _vocab(tmp_path)
    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(b"")
    step = tmp_path / "steps" / "gpt2" / "step_000010.safetensors"
    step.parent.mkdir(parents=True)
    step.write_bytes(b"")
    assert find_char_vocab(step) == tmp_path / "char_vocab.json"
    for weights in (ckpt, step):
        choice = choose_tokenizer(weights, 5, nanogpt=True)
        assert choice.kind == "char", choice
        tok, _reason = load_tokenizer(choice)
        assert isinstance(tok, CharTokenizer) and tok.decode([2, 3]) == "ab"
    # Without the file: the old answer (ids shown), never GPT-2's BPE for a 5-symbol model.
    (tmp_path / "char_vocab.json").unlink()
    assert choose_tokenizer(ckpt, 5, nanogpt=True).kind == "none"
