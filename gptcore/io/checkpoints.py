"""Reading checkpoint files safely: safetensors (checked before it is mapped) and torch pickles
(only through `torch.load(weights_only=True)`, never retried unsafely).

Every tensor returned here is memory-mapped from the file, not copied: `loading.py` makes the
one copy into the model (in the requested dtype, on the requested device). Every failure is a
`LoadError` naming the file, what is wrong with it and what to do.
"""
from __future__ import annotations

import json
import math
import pickle
import pickletools
import re
import struct
import warnings
from pathlib import Path
from typing import Any

import torch

import gptcore.io.torch_refusals as torch_refusals
from gptcore.errors import Cancelled, UserError


class LoadError(UserError):
    """A checkpoint that cannot be loaded; the message names the file and the fix."""

    title = "Could not load the model"


class LoadCancelled(Cancelled, LoadError):
    """The caller's `cancel()` returned True; nothing was kept."""


# safetensors element sizes in bits (its format spec); sub-byte kinds are packed.
_SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
# The safetensors library refuses headers above 100 MB; so do we, before reading one.
MAX_SAFETENSORS_HEADER = 100_000_000
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = b"\x80"  # pickle protocol 2+ opens with PROTO; torch.save's legacy format is such a pickle
_PICKLE_PROTOCOLS = range(2, 6)  # what PROTO's argument can be today
_PICKLE_OPCODES = frozenset(op.code.encode("latin-1") for op in pickletools.opcodes)
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"
_SNIFF_BYTES = 1024


def corrupt(path: Path, detail: str, fix: str = "re-download or re-save it") -> LoadError:
    return LoadError(f"corrupt file {path}: {detail}; {fix}")


# -- what a file is, from its first bytes ----------------------------------------------------

def sniff(path: Path) -> str:
    """What the file's first bytes say it is: "empty", "zip" (torch.save's format since 1.6),
    "pickle" (torch.save's legacy format, or any pickle), "safetensors" (a little-endian u64
    header length, then a JSON object), "text" (UTF-8 without NUL bytes) or "unknown".

    Why: the suffix people give a file says little (a `ckpt.pt` that is a Git LFS pointer or an
    HTML error page is common), and each reader's own failure on a foreign file describes the
    wrong thing (a text file read as safetensors "claims" a header of 10^18 bytes)."""
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    if not head:
        return "empty"
    if _is_text(head):  # first: safetensors' length field holds NUL bytes, text never does
        return "text"
    # Before the archive magics: a header length such as 640 is the bytes 80 02 00…, a pickle's opening.
    if len(head) > 8 and head[7] == 0 and head[8:9] == b"{":
        return "safetensors"
    if head.startswith(_ZIP_MAGIC):
        return "zip"
    if _looks_like_pickle(head):
        return "pickle"
    return "unknown"


def _looks_like_pickle(head: bytes) -> bool:
    """PROTO, a protocol pickle knows, then a real opcode. Why all three: one byte 0x80 alone is
    what 1 random file in 256 opens with, and a damaged file must be called damaged, not a pickle."""
    return (len(head) >= 3 and head[:1] == _PICKLE_PROTO and head[1] in _PICKLE_PROTOCOLS
            and head[2:3] in _PICKLE_OPCODES)


def _is_text(head: bytes) -> bool:
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a multi-byte character cut by the read is still text
        return exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
    return True


def not_what_was_expected(path: Path, kind: str, expected: str) -> LoadError:
    """A LoadError naming what `path` really is (from `sniff`) instead of the reader's symptom."""
    if kind == "text":
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
        if head.startswith(_LFS_POINTER):
            return LoadError(f"{path} is not {expected} but a Git LFS pointer (a small text file standing in for "
                             f"the real weights); run `git lfs pull` in its repository, or download the file itself")
        first = head.decode("utf-8", errors="replace").strip().splitlines()[0][:80] if head.strip() else ""
        html = head.lstrip()[:15].lower().startswith((b"<!doctype", b"<html"))
        what = "an HTML page (a failed download?)" if html else "text"
        if "PyTorch" in expected:
            what += ", not a zip or pickle archive"
        return LoadError(f"{path} is not {expected} (it is {what}; it begins "
                         f"{first!r}). Point at the weights themselves: a folder with config.json + "
                         f"model.safetensors, a .safetensors file, a nanoGPT ckpt.pt or a torch.save'd model.pth")
    if kind == "safetensors":
        return LoadError(f"{path} is not {expected} but a safetensors file; rename it to end in .safetensors, "
                         f"or load the file itself")
    archive = "zip archive (what torch.save writes)" if kind == "zip" else "pickle (a torch.save file or other)"
    return LoadError(f"{path} is not {expected} but a {archive}; rename it to end in .pt or .pth")


def _first_bytes(path: Path, n: int = 8) -> str:
    with open(path, "rb") as f:
        return "it begins with bytes " + f.read(n).hex(" ")


# -- safetensors ----------------------------------------------------------------------------

def check_safetensors_header(path: Path) -> dict[str, dict]:
    """Parse and validate the header against the file before anything is mapped.

    A header is a little-endian u64 length N, N bytes of JSON, then the data buffer. The format
    requires every tensor's [begin, end) to lie inside the buffer, to match dtype × shape, and the
    tensors to tile the buffer exactly (no overlap, no hole). Checking that here means a file that
    lies is refused with a message instead of faulting (SIGBUS) when a page past its end is read.
    Returns {name: {"dtype", "shape", "data_offsets"}} (the "__metadata__" entry dropped).
    """
    size = path.stat().st_size
    if size == 0:
        raise corrupt(path, "the file is empty (0 bytes)")
    if size < 8:
        raise corrupt(path, f"only {size} bytes, too short for a safetensors header")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size - 8:
            raise corrupt(path, f"the header claims {n:,} bytes but the file holds only {size - 8:,} after the "
                                f"length field (truncated, or not a safetensors file)")
        if n > MAX_SAFETENSORS_HEADER:
            raise corrupt(path, f"header of {n:,} bytes is beyond the format's 100 MB limit")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt(path, f"the header is not valid JSON ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise corrupt(path, "the header is not a JSON object")
    header.pop("__metadata__", None)
    buffer = size - 8 - n
    spans = []
    for name, entry in header.items():
        spans.append((*_tensor_span(path, name, entry), name))
    spans.sort()
    expected_start, previous = 0, None
    for begin, end, name in spans:
        if begin < expected_start:
            raise corrupt(path, f"tensors {previous!r} and {name!r} overlap in the data buffer "
                                f"(bytes {begin}..{expected_start}); a valid file never does that")
        if begin > expected_start:
            raise corrupt(path, f"a gap of {begin - expected_start} unindexed bytes before {name!r}")
        expected_start, previous = end, name
    if expected_start > buffer:
        raise corrupt(path, f"tensor {previous!r} ends at byte {expected_start:,} of the data but the file holds "
                            f"only {buffer:,} (truncated download or copy)")
    if expected_start < buffer:
        raise corrupt(path, f"{buffer - expected_start:,} trailing bytes after the last tensor")
    return header


def _tensor_span(path: Path, name: str, entry: Any) -> tuple[int, int]:
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        raise corrupt(path, f"header entry {name!r} lacks dtype/shape/data_offsets")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in _SAFETENSORS_BITS:
        raise corrupt(path, f"tensor {name!r} has unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise corrupt(path, f"tensor {name!r} has an invalid shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) and o >= 0 for o in offsets)):
        raise corrupt(path, f"tensor {name!r} has invalid data_offsets {offsets!r}")
    begin, end = offsets
    want = -(-math.prod(shape) * _SAFETENSORS_BITS[dtype] // 8)  # bytes, rounded up for packed kinds
    if end < begin or end - begin != want:
        raise corrupt(path, f"tensor {name!r} ({dtype} {shape}) needs {want:,} bytes but its "
                            f"data_offsets span {end - begin:,}")
    return begin, end


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of one file, memory-mapped (no copy), after the header check."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    kind = sniff(path)
    if kind in ("text", "zip", "pickle"):
        raise not_what_was_expected(path, kind, "a safetensors file")
    check_safetensors_header(path)
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, RuntimeError, TypeError, OSError) as exc:
        # e.g. a dtype this torch build cannot represent; the header itself was sound.
        raise corrupt(path, f"safetensors could not read it ({exc})") from None


# -- torch pickles ----------------------------------------------------------------------------

def read_torch(path: Path) -> Any:
    """`torch.load(weights_only=True)`: the restricted unpickler rebuilds tensors and plain
    containers only. Anything else (a function that would run, a custom class) is refused and
    named; there is no second, unsafe attempt. Zip-format files are memory-mapped. torch's
    warnings about the file (e.g. "Detected pickle protocol 4") are not passed on: the refusal,
    if any, says what they meant."""
    size = path.stat().st_size
    if size == 0:
        raise corrupt(path, "the file is empty (0 bytes)")
    kind = sniff(path)
    if kind in ("text", "safetensors"):
        raise not_what_was_expected(path, kind, "a PyTorch checkpoint")
    is_zip = kind == "zip"
    damage = torch_refusals.zip_problem(path) if is_zip else None
    if damage:
        raise corrupt(path, damage)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.")
            return torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except pickle.UnpicklingError as exc:
        raise _unpickling_refusal(path, kind, exc) from None
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:  # truncated zip, EOF, random bytes: torch raises many kinds
        detail = torch_refusals.damage_detail(exc) or (
            f"torch.load failed: {exc.__class__.__name__}: {torch_refusals.torch_text(exc) or 'unexpected end of file'}")
        if kind == "unknown":
            detail += f" (it is not a zip or pickle archive, the two forms torch.save writes; {_first_bytes(path)})"
        raise corrupt(path, detail) from None


def _unpickling_refusal(path: Path, kind: str, exc: BaseException) -> LoadError:
    """Name what the file asks for, from a static walk of its pickle (torch names only the first
    global it meets, and none at all for a protocol-4 pickle), else from torch's message."""
    facts = torch_refusals.scan(path, kind)
    bad = torch_refusals.refused_names(facts)
    if bad and bad != [torch_refusals.LOAD_FROM_BYTES]:
        return _refusal(path, bad[0], [n for n in bad[1:] if n != torch_refusals.LOAD_FROM_BYTES])
    if bad:
        return LoadError(
            f"refused {path}: it is a plain pickle of tensors (pickle.dump, not torch.save); rebuilding them asks to "
            f"call `{torch_refusals.LOAD_FROM_BYTES}`, an unrestricted torch.load of bytes inside the file — a pickle "
            f"can run any code that way. Nothing was executed. Re-save it with torch.save or "
            f"safetensors.torch.save_file where it was made, and load that")
    named = re.search(r"GLOBAL ([\w.]+)", str(exc))
    if named:
        return _refusal(path, named.group(1))
    if facts.framed or (facts.protocol or 0) >= 4:
        return LoadError(
            f"cannot read {path} safely: it was pickled with protocol {facts.protocol or 4} (pickle.dump, or "
            f"torch.save(..., pickle_protocol=4)), which torch's restricted reader cannot parse. Nothing in it asks "
            f"to run code, and nothing was executed. Re-save it with torch.save's default protocol or with "
            f"safetensors.torch.save_file, and load that")
    return corrupt(path, f"not a valid torch checkpoint ({torch_refusals.torch_text(exc) or 'an unreadable pickle'})")


def _refusal(path: Path, name: str, others: list[str] | tuple = ()) -> LoadError:
    # The name is never imported to find out what it is (importing can run code too): by Python's
    # naming convention a capitalised last part is a class, anything else a function to be called.
    if name.rsplit(".", 1)[-1][:1].isupper():
        what = f"holds an object of the custom class `{name}`, which a safe load cannot rebuild"
    else:
        what = f"asks to call `{name}` while being unpickled — a pickle can run any code that way"
    if others:
        what += f" (it also names {', '.join(f'`{n}`' for n in others[:3])})"
    return LoadError(
        f"refused {path}: it {what}. Nothing was executed. Only plain tensors are read from pickle "
        f"files; if you trust the file, re-save just its weights (e.g. with safetensors.torch.save_file) "
        f"and load that"
    )


# -- state dicts out of the containers people save ----------------------------------------------

def tensors_only(path: Path, obj: Any, what: str = "state dict") -> dict[str, torch.Tensor]:
    """A {name: tensor} dict out of whatever torch.load returned, or a clear refusal."""
    if not isinstance(obj, dict) or not obj:
        raise LoadError(f"{path} does not hold a {what} (a dict of tensors) but {type(obj).__name__}; "
                        f"give a GPT-2 state dict, a nanoGPT ckpt.pt or a .safetensors file")
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise LoadError(f"{path}: the {what} holds non-tensor entries ({', '.join(map(str, bad[:5]))}); "
                        f"give a GPT-2 state dict, a nanoGPT ckpt.pt or a .safetensors file")
    return dict(obj)


def read_sharded_index(index_path: Path, reader) -> dict[str, torch.Tensor]:
    """A `*.index.json` (`weight_map`: tensor name -> shard file) read shard by shard."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        assert isinstance(weight_map, dict)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AssertionError) as exc:
        raise corrupt(index_path, f"not a shard index with a weight_map ({exc.__class__.__name__})") from None
    folder = index_path.parent
    shards = {}
    for name in sorted(set(weight_map.values())):
        if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
            raise corrupt(index_path, f"shard name {name!r} is not a file name in its folder")
        shard = folder / name  # (in a hub cache a symlink into blobs/, so not resolved here)
        if not shard.is_file():
            raise LoadError(f"incomplete checkpoint {folder}: shard {name} listed in {index_path.name} is missing; "
                            f"re-download the whole folder")
        shards[name] = reader(shard)
    state = {}
    for key, name in weight_map.items():
        if key not in shards[name]:
            raise corrupt(folder / str(name), f"tensor {key!r} listed in {index_path.name} is not in it")
        state[key] = shards[name][key]
    return state


def read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt(path, f"not valid JSON ({exc})", "fix it or re-download it") from None
    if not isinstance(value, dict):
        raise corrupt(path, "expected a JSON object", "fix it or re-download it")
    return value
