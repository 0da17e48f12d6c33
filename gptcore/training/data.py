"""Training text as token ids, and the batch of each iteration.

Three sources, as nanoGPT has them: a text file encoded char-level (shakespeare_char's way:
the vocabulary is the sorted set of its characters, the first 90 % trains, the last 10 %
validates) or with GPT-2's BPE (offline, gptcore.io.tokenizer); a folder nanoGPT's prepare.py
wrote (train.bin/val.bin of uint16 ids + meta.pkl); and, when nothing is given, the text of
CPython's `pydoc_data.topics` ("pydoc topics"), which is wherever Python is, so a run needs no
download.

Batches are a function of (seed, split, iteration), not of a running random state: batch `it`
comes from a torch.Generator seeded by them and holds the whole global batch (every micro-step
of every process), which the Trainer splits. So a run gives the same batches whatever the
number of processes, and a resumed run the same batches as an uninterrupted one.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gptcore.io.atomic import atomic_path, atomic_write_bytes

CHAR_VOCAB_FILE = "char_vocab.json"  # beside a checkpoint: how the app turns ids back into text
CHAR_VOCAB_FORMAT = "gptcore-char-vocab-1"
PYDOC_TOPICS = "pydoc topics"
VAL_FRACTION = 0.1  # shakespeare_char's split: the last 10 % of the text


class DataError(ValueError):
    """Training data that cannot be used; the message names the file and the fix."""


@dataclass
class Corpus:
    """Token ids of a train and a val split, and how to read them back.

    `train`/`val` are 1-D integer arrays (np.memmap for nanoGPT's .bin files, so a 9 GB corpus is
    not read into memory). `tokenizer` is "char" (then `chars[i]` is the character of id i) or
    "gpt2". `vocab_size` is the model's minimum vocabulary for these ids.
    """

    name: str
    description: str
    train: np.ndarray
    val: np.ndarray
    vocab_size: int
    tokenizer: str
    chars: list[str] | None = None
    _stoi: dict = field(default=None, repr=False)

    # -- ids <-> text -------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if self.tokenizer == "char":
            if self._stoi is None:
                self._stoi = {c: i for i, c in enumerate(self.chars)}
            missing = sorted({c for c in text if c not in self._stoi})
            if missing:
                raise DataError(f"characters {''.join(missing)!r} are not in this corpus's vocabulary of "
                                f"{len(self.chars)}; use only characters the model was trained on")
            return [self._stoi[c] for c in text]
        from gptcore.io.tokenizer import gpt2_tokenizer

        return gpt2_tokenizer().encode(text)

    def decode(self, ids) -> str:
        if self.tokenizer == "char":
            return "".join(self.chars[i] if 0 <= i < len(self.chars) else "\N{REPLACEMENT CHARACTER}" for i in ids)
        from gptcore.io.tokenizer import gpt2_tokenizer

        return gpt2_tokenizer().decode(list(ids))

    # -- batches ------------------------------------------------------------------------------
    def check_block_size(self, block_size: int) -> None:
        """Each split must hold one window of block_size + 1 tokens (inputs and their targets)."""
        for split, ids in (("train", self.train), ("val", self.val)):
            if len(ids) < block_size + 1:
                limit = min(len(self.train), len(self.val)) - 1
                fix = f"block_size at most {limit:,}, or a longer text" if limit > 0 else "a longer text"
                raise DataError(f"{self.name}: the {split} split has {len(ids):,} tokens, fewer than block_size + 1 = "
                                f"{block_size + 1:,} (one window of inputs and their targets); use {fix}")

    def batch(self, split: str, index: int, rows: int, block_size: int, seed: int,
              stream: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y), each (rows, block_size) int64: `rows` random windows of `split`, y shifted by one.

        Seeded by (seed, split, stream, index): the training loop asks for stream "train" with
        index = iteration and rows = the global batch; estimate_loss for stream "eval" with index
        0..eval_iters-1, so every evaluation scores the same windows (less noise between evals).
        """
        ids = self.train if split == "train" else self.val if split == "val" else None
        if ids is None:
            raise DataError(f"split must be 'train' or 'val', got {split!r}")
        self.check_block_size(block_size)
        gen = torch.Generator().manual_seed(batch_seed(seed, split, stream, index))
        starts = torch.randint(len(ids) - block_size, (rows,), generator=gen).tolist()
        windows = np.stack([np.asarray(ids[i:i + block_size + 1], dtype=np.int64) for i in starts])  # (rows, T+1)
        both = torch.from_numpy(windows)
        return both[:, :-1].contiguous(), both[:, 1:].contiguous()  # (rows, T) each

    # -- the vocabulary beside a checkpoint ---------------------------------------------------
    def vocab_dict(self) -> dict:
        return {"format": CHAR_VOCAB_FORMAT, "tokenizer": self.tokenizer, "vocab_size": self.vocab_size,
                "chars": self.chars, "corpus": self.name}

    def save_vocab(self, folder) -> Path | None:
        """Write char_vocab.json into `folder` (char-level corpora only: GPT-2's is known)."""
        if self.tokenizer != "char":
            return None
        path = Path(folder) / CHAR_VOCAB_FILE
        atomic_write_bytes(path, json.dumps(self.vocab_dict(), ensure_ascii=False).encode("utf-8"))
        return path

    def check_vocab(self, vocab_size: int, saved: dict | None = None, what: str = "the checkpoint") -> None:
        """Refuse a model (or its saved vocabulary) that does not read these ids the same way."""
        if vocab_size < self.vocab_size:
            raise DataError(f"{what} has vocab_size {vocab_size:,} but {self.name} needs {self.vocab_size:,} ids "
                            f"({self.tokenizer}); train a new model on this data or use the data it was trained on")
        if saved is not None and self.tokenizer == "char" and saved.get("chars") != self.chars:
            theirs = saved.get("chars") or []
            raise DataError(f"{what} was trained on another character vocabulary ({len(theirs)} symbols, "
                            f"{saved.get('corpus', '?')}) than {self.name} ({len(self.chars)} symbols): the same id "
                            f"would mean another character; resume on the original data or start a new run")


def batch_seed(seed: int, split: str, stream: str, index: int) -> int:
    """A 63-bit generator seed from (seed, split, stream, index); hashing keeps streams apart."""
    digest = hashlib.blake2b(f"{seed}/{split}/{stream}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


# -- sources -------------------------------------------------------------------------------------

def load_corpus(source=None, tokenizer: str = "char") -> Corpus:
    """The corpus at `source`: None -> pydoc topics; a folder with train.bin -> nanoGPT's prepared
    data (its own vocabulary, `tokenizer` ignored); a file -> its text, `tokenizer` "char" or "gpt2"."""
    if tokenizer not in ("char", "gpt2"):
        raise DataError(f"tokenizer must be 'char' or 'gpt2', got {tokenizer!r}")
    if source is None:
        return corpus_from_text(pydoc_topics_text(), PYDOC_TOPICS, tokenizer,
                                "the text of CPython's pydoc_data.topics (offline, in every Python)")
    path = Path(source).expanduser()
    if path.is_dir():
        return load_prepared(path)
    return corpus_from_text(read_text_file(path), path.name, tokenizer, str(path))


def pydoc_topics_text() -> str:
    """pydoc_data.topics's help texts, by sorted topic name, joined by blank lines (CPython 3.11.7:
    465,126 characters, 103 symbols; other Python versions ship other text)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def read_text_file(path: Path) -> str:
    if not path.exists():
        raise DataError(f"{path}: no such file; give a UTF-8 text file, a folder with nanoGPT's train.bin/val.bin, "
                        f"or nothing for the built-in corpus ({PYDOC_TOPICS})")
    if not path.is_file():
        raise DataError(f"{path} is not a regular file; give a UTF-8 text file")
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError(f"{path} is empty; give a text file with something to learn")
    if b"\x00" in raw[:65536]:
        raise DataError(f"{path} is binary (it holds NUL bytes), not text; give a UTF-8 text file, or for "
                        f"tokenised data a folder with nanoGPT's train.bin and val.bin")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start:,}); convert it, e.g. "
                        f"`iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8.txt`") from None


def corpus_from_text(text: str, name: str, tokenizer: str, description: str) -> Corpus:
    """Encode `text` and split it shakespeare_char's way: first 90 % train, last 10 % val."""
    if not text:
        raise DataError(f"{name} is empty; give a text with something to learn")
    if tokenizer == "char":
        chars = sorted(set(text))
        stoi = {c: i for i, c in enumerate(chars)}
        ids = np.fromiter((stoi[c] for c in text), dtype=np.uint16 if len(chars) < 65536 else np.int32, count=len(text))
        vocab = len(chars)
    else:
        from gptcore.io.tokenizer import gpt2_tokenizer

        enc = gpt2_tokenizer()
        ids, chars, vocab = np.array(enc.encode_ordinary(text), dtype=np.uint16), None, enc.n_vocab
    n = int(len(ids) * (1 - VAL_FRACTION))
    what = f"{len(text):,} characters, {len(chars):,} symbols" if chars else f"{len(ids):,} GPT-2 tokens"
    return Corpus(name, f"{description} ({what})", ids[:n], ids[n:], vocab, tokenizer, chars)


def load_prepared(folder: Path) -> Corpus:
    """nanoGPT's prepare.py output: train.bin/val.bin (uint16 ids) + meta.pkl (char-level) or no
    meta.pkl (GPT-2 BPE, vocab 50257). meta.pkl is read by `read_meta`, which runs no code."""
    missing = [n for n in ("train.bin", "val.bin") if not (folder / n).is_file()]
    if missing:
        raise DataError(f"{folder} has no {' or '.join(missing)}; a prepared folder is what nanoGPT's "
                        f"data/*/prepare.py writes (train.bin, val.bin, maybe meta.pkl), or give a text file")
    splits = []
    for name in ("train.bin", "val.bin"):
        path = folder / name
        if path.stat().st_size < 4 or path.stat().st_size % 2:
            raise DataError(f"{path} holds {path.stat().st_size} bytes: not uint16 token ids (2 bytes each) of "
                            f"any length worth training on; run prepare.py again")
        splits.append(np.memmap(path, dtype=np.uint16, mode="r"))
    meta_path = folder / "meta.pkl"
    if meta_path.is_file():
        meta = read_meta(meta_path)
        itos = meta.get("itos")
        vocab = meta.get("vocab_size")
        if not isinstance(vocab, int) or vocab <= 0:
            raise DataError(f"{meta_path} has no vocab_size (a whole number); run prepare.py again")
        chars = [itos[i] for i in range(vocab)] if isinstance(itos, dict) and all(
            isinstance(itos.get(i), str) for i in range(vocab)) else None
        tokenizer = "char" if chars is not None else "ids"
    else:
        chars, vocab, tokenizer = None, 50257, "gpt2"
    corpus = Corpus(folder.name, f"nanoGPT prepared data in {folder} ({len(splits[0]):,} train, "
                                 f"{len(splits[1]):,} val tokens)", splits[0], splits[1], vocab, tokenizer, chars)
    top = max(int(splits[0].max()), int(splits[1].max())) if len(splits[0]) < 50_000_000 else None
    if top is not None and top >= vocab:
        raise DataError(f"{folder}: token id {top} is beyond the vocabulary ({vocab}); meta.pkl and the .bin "
                        f"files are from different prepare runs")
    return corpus


def read_meta(path: Path) -> dict:
    """nanoGPT's meta.pkl ({'vocab_size', 'itos', 'stoi'}) without running anything it carries
    (gptcore.io.nanogpt_meta's restricted unpickler), a DataError when it cannot be used."""
    from gptcore.io.nanogpt_meta import MetaError, read_meta as read_plain

    try:
        return read_plain(path)
    except MetaError as exc:
        raise DataError(str(exc)) from None


def nanogpt_dataset(corpus: Corpus, source, run_root, preset: str | None = None) -> str:
    """What a checkpoint records as config['dataset'], nanoGPT's way, so that its sample.py finds
    `data/<dataset>/meta.pkl`: a nanoGPT data folder's own name (sample.py run from the folder above
    data/ finds it, as for nanoGPT's own runs); for a text (a file or the built-in corpus) the
    absolute path of the prepared folder written into the run (`write_prepared`), which
    os.path.join('data', ...) keeps as it is, so sample.py finds it from wherever it runs; a
    preset's synthetic data has no folder and keeps its name."""
    if preset is not None or (source is not None and Path(source).is_dir()):
        return corpus.name
    folder = write_prepared(corpus, Path(run_root) / "data" / prepared_name(corpus))
    return str(folder.resolve()) if folder is not None else corpus.name


def prepared_name(corpus: Corpus) -> str:
    """A folder name for `corpus` in nanoGPT's style (shakespeare_char): its stem and tokenizer."""
    stem = Path(corpus.name).stem if "." in corpus.name else corpus.name
    slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem).strip("_") or "text"
    return f"{slug}_{corpus.tokenizer}"


def write_prepared(corpus: Corpus, folder: Path) -> Path | None:
    """nanoGPT's prepared data folder for `corpus`, as shakespeare_char's prepare.py writes it:
    train.bin and val.bin (uint16 ids, the same 90/10 split) and, char-level, meta.pkl
    ({'vocab_size', 'itos', 'stoi'}); GPT-2 BPE data has no meta.pkl (sample.py then uses GPT-2's
    encoding, as for openwebtext). Kept when already there (a resumed run). None when the ids do
    not fit nanoGPT's uint16."""
    if corpus.vocab_size > 65536 or corpus.tokenizer not in ("char", "gpt2"):
        return None
    if (folder / "train.bin").is_file() and (folder / "val.bin").is_file():
        return folder
    from gptcore.io.nanogpt_meta import write_meta

    folder.mkdir(parents=True, exist_ok=True)
    if corpus.tokenizer == "char":
        write_meta(folder, corpus.chars)
    for name, ids in (("val.bin", corpus.val), ("train.bin", corpus.train)):  # train.bin last: it marks done
        with atomic_path(folder / name) as tmp:
            np.asarray(ids, dtype=np.uint16).tofile(tmp)
    return folder


def read_saved_vocab(folder) -> dict | None:
    """The char_vocab.json a run saved in `folder`, or None if there is none."""
    path = Path(folder) / CHAR_VOCAB_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is not readable JSON ({exc}); delete it or copy it again from the run") from None
    if not isinstance(saved, dict) or saved.get("format") != CHAR_VOCAB_FORMAT or not isinstance(saved.get("chars"), list):
        raise DataError(f"{path} is not a gptcore character vocabulary (format {CHAR_VOCAB_FORMAT})")
    return saved
