"""nanoGPT's `meta.pkl`: the character vocabulary of a char-level dataset, read without running it,
and found from a checkpoint the way nanoGPT's sample.py finds it.

What it is: nanoGPT's data/<dataset>/prepare.py (shakespeare_char) pickles
`{'vocab_size': int, 'itos': {id: char}, 'stoi': {char: id}}` beside train.bin/val.bin, and its
train.py records `config['dataset']` in ckpt.pt; sample.py then opens
`os.path.join('data', config['dataset'], 'meta.pkl')` relative to the folder it runs in.

Why a restricted reader: `pickle.load` runs whatever a pickle names (a `meta.pkl` from the web can
call `os.system`). nanoGPT's meta holds only dicts, strings and ints, which pickle builds with its
own opcodes; `_PlainUnpickler` admits no global at all, so a file naming any class or function is
refused before anything of it runs. No torch import here (the app reads it on the GUI side too).
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

META_FILE = "meta.pkl"
_MAX_META_BYTES = 16 << 20  # shakespeare_char's is ~1 kB; a large file is not a vocabulary


class MetaError(ValueError):
    """A meta.pkl that cannot be used; the message names the file and why."""


class _PlainUnpickler(pickle.Unpickler):
    """Admits no global: dicts, lists, tuples, strings, numbers and booleans are built by pickle's
    own opcodes; anything naming a class or function (how a pickle runs code) is refused."""

    def find_class(self, module, name):
        raise MetaError(f"refused to read: it names {module}.{name}, but a nanoGPT meta.pkl holds only plain "
                        f"dicts, strings and numbers (a pickle naming a function can run any code that way). "
                        f"Nothing was executed; run prepare.py again to rewrite it")


def read_meta(path) -> dict:
    """nanoGPT's meta.pkl ({'vocab_size', 'itos', 'stoi'}) without running anything it carries."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise MetaError(f"{path} cannot be read ({exc.strerror or exc})") from None
    if size > _MAX_META_BYTES:
        raise MetaError(f"{path} is {size:,} bytes; a meta.pkl is a few kB. Not reading it")
    try:
        with open(path, "rb") as f:
            meta = _PlainUnpickler(f).load()
    except MetaError as exc:
        raise MetaError(f"{path}: {exc}") from None
    except Exception as exc:  # truncated or not a pickle: a damaged file, say so
        raise MetaError(f"{path} is not a readable meta.pkl ({type(exc).__name__}: {exc}); "
                        f"run prepare.py again") from None
    if not isinstance(meta, dict):
        raise MetaError(f"{path} holds a {type(meta).__name__}, not nanoGPT's dict of vocab_size/itos/stoi")
    return meta


def meta_chars(meta: dict, path="meta.pkl") -> list[str]:
    """The character of each id 0..vocab_size-1 (`itos`); MetaError when the meta is not char-level."""
    vocab, itos = meta.get("vocab_size"), meta.get("itos")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 0:
        raise MetaError(f"{path} has no vocab_size (a whole number); run prepare.py again")
    if not isinstance(itos, dict) or not all(isinstance(itos.get(i), str) for i in range(vocab)):
        raise MetaError(f"{path} has no character for every id below vocab_size {vocab} (its itos); "
                        f"it is not a character-level vocabulary")
    return [itos[i] for i in range(vocab)]


def write_meta(folder, chars: list[str]) -> Path:
    """meta.pkl as shakespeare_char's prepare.py writes it (plain dicts: any nanoGPT reads it)."""
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    from gptcore.io.atomic import atomic_write_bytes

    path = Path(folder) / META_FILE
    atomic_write_bytes(path, pickle.dumps(meta, protocol=4))
    return path


def data_folders(weights, dataset) -> list[Path]:
    """Where nanoGPT's `data/<dataset>/` can be for the checkpoint at `weights`, likeliest first:
    beside the out_dir (nanoGPT's layout: out-shakespeare-char/ next to data/), inside the out_dir
    itself (a gptcore run keeps its prepared data there), the current folder (where nanoGPT's
    scripts run), and `dataset` itself when it is a path (os.path.join keeps an absolute one)."""
    if not isinstance(dataset, str) or not dataset.strip():
        return []
    weights = Path(weights)
    folder = weights if weights.is_dir() else weights.parent
    out = [base / "data" / dataset for base in (folder.parent, folder, Path.cwd())]
    name = Path(dataset).name
    if name != dataset:  # a path: itself, and by its last part in the places above (a moved run)
        out.insert(0, Path(dataset))
        out += [base / "data" / name for base in (folder, folder.parent)]
    seen, unique = set(), []
    for path in out:
        key = os.path.normpath(str(path))
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def meta_candidates(weights, dataset) -> list[Path]:
    """The meta.pkl of each of `data_folders`, in the same order."""
    return [folder / META_FILE for folder in data_folders(weights, dataset)]


def find_meta(weights, dataset) -> Path | None:
    """The first meta.pkl of `meta_candidates` that exists, or None."""
    return next((p for p in meta_candidates(weights, dataset) if p.is_file()), None)
