"""A character-level tokenizer read from a run's `char_vocab.json`, behind the interface the app
uses on `GPT2Tokenizer` (`encode`, `decode`, `token_str`, `token_bytes`, `n_vocab`, `eot_token`).

Why: a model trained by `python -m gptcore.train` on a text file (or the default pydoc corpus)
reads one id per character, with ids numbered by training/data.py's sorted alphabet. Without
this the app could only show such a model's tokens as ids ("#42"); with it, the Attention,
Generation and Attribution panels show the characters the model was trained on. The vocabulary
file is plain JSON (never a pickle), written by `Corpus.save_vocab` beside the checkpoint.
"""
from __future__ import annotations

import json
from pathlib import Path

CHAR_VOCAB_FILE = "char_vocab.json"  # the same name training/data.py writes (kept here: no torch import)
CHAR_VOCAB_FORMAT = "gptcore-char-vocab-1"


class CharTokenizer:
    """One id per character; `chars[i]` is the character of id i. A character outside the
    vocabulary is refused with the characters it does know, not silently dropped."""

    eot_token = None  # a char corpus has no end-of-text token
    bos_token = None
    eos_token = None

    def __init__(self, chars, name: str = "char"):
        self.chars = [str(c) for c in chars]
        self.name = name
        self.n_vocab = len(self.chars)
        self._ids = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_file(cls, path) -> "CharTokenizer":
        """From a char_vocab.json; ValueError naming the file when it is not one."""
        path = Path(path)
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} cannot be read as a character vocabulary ({exc}); copy it again from the "
                             f"run folder") from None
        chars = saved.get("chars") if isinstance(saved, dict) else None
        if (not isinstance(saved, dict) or saved.get("format") != CHAR_VOCAB_FORMAT or not isinstance(chars, list)
                or not all(isinstance(c, str) for c in chars)):
            raise ValueError(f"{path} is not a gptcore character vocabulary (format {CHAR_VOCAB_FORMAT})")
        return cls(chars, name=f"char ({len(chars)} symbols)")

    @classmethod
    def from_meta(cls, path) -> "CharTokenizer":
        """From nanoGPT's meta.pkl (read without running it: nanogpt_meta.read_meta); ValueError
        naming the file when it is not a character vocabulary."""
        from gptcore.io.nanogpt_meta import meta_chars, read_meta

        chars = meta_chars(read_meta(path), path)
        return cls(chars, name=f"char ({len(chars)} symbols, nanoGPT meta.pkl)")

    def encode(self, text: str, **_kwargs) -> list[int]:
        missing = sorted({c for c in text if c not in self._ids})
        if missing:
            shown = "".join(missing[:10])
            raise ValueError(f"characters {shown!r} are not in this model's character vocabulary of "
                             f"{self.n_vocab} symbols (it was trained on a corpus without them); type text "
                             f"made of the corpus's characters")
        return [self._ids[c] for c in text]

    def token_str(self, token: int) -> str:
        token = int(token)
        if 0 <= token < self.n_vocab:
            return self.chars[token]
        return f"\N{REPLACEMENT CHARACTER}<id {token}>"  # a padded vocab_size has ids without a character

    def token_bytes(self, token: int) -> bytes:
        return self.token_str(token).encode("utf-8")

    def decode(self, tokens, errors: str = "replace") -> str:
        return "".join(self.token_str(t) for t in tokens)


def find_char_vocab(weights: Path) -> Path | None:
    """The char_vocab.json beside a checkpoint (its folder, or the run folder above steps/<scheme>/)."""
    weights = Path(weights)
    folder = weights if weights.is_dir() else weights.parent
    for candidate in (folder, folder.parent.parent):
        path = candidate / CHAR_VOCAB_FILE
        if path.is_file():
            return path
    return None
