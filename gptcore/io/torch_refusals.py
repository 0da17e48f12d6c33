"""Why `torch.load(weights_only=True)` refused a file, in words a user can act on.

torch's own messages describe torch, not the file: a plain pickle written with protocol 4 comes
back as "Unsupported operand 149 … Please file an issue", a cut-short zip as "an internal miniz
error", and the restricted unpickler names only the first global it meets (for a pickle of
tensors that is `torch.storage._load_from_bytes`, not the `posix.system` further on). So after a
refusal the file's pickle is read here *statically*: `pickletools.genops` walks the opcodes and
records the `module.name` of every GLOBAL / STACK_GLOBAL without importing or calling anything.
Nothing in this module builds an object from the file.

`checkpoints.read_torch` turns the answers into a LoadError; this module only returns text.
"""
from __future__ import annotations

import pickletools
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

# A legacy torch.save file is several pickles in a row (magic number, protocol, sys info, the
# object, the storage keys) followed by raw storage bytes; reading past them is never needed.
_MAX_PICKLES = 6
# pickle's FRAME opcode (protocol 4+), which torch's restricted unpickler does not know.
_FRAME = 0x95
# A plain `pickle.dump` of a tensor rebuilds its storage through this call: an unrestricted
# torch.load of bytes held inside the pickle.
LOAD_FROM_BYTES = "torch.storage._load_from_bytes"
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}
# torch's sentences about itself, dropped from anything we show (they name torch's internals,
# suggest an unsafe retry, or ask the user to file an issue with PyTorch).
_TORCH_BOILERPLATE = re.compile(
    r"(Weights only load failed\..*?trusted source\.|Please file an issue.*?use case:|WeightsUnpickler error:|"
    r"Check the documentation of torch\.load.*|This is an internal miniz error\..*|"
    r"In PyTorch 2\.6, we changed.*?trusted source\.)", re.S)


@dataclass
class PickleFacts:
    """What a static walk of the file's pickle(s) found: the globals it names, in order, and
    the highest pickle protocol seen (None when no PROTO opcode was met)."""

    names: list[str] = field(default_factory=list)
    protocol: int | None = None
    framed: bool = False


def scan(path: Path, kind: str) -> PickleFacts:
    """The globals the file's pickle names, never running it. `kind` is checkpoints.sniff's:
    for "zip" the archive's data.pkl is walked, for "pickle" the file from its first byte."""
    facts = PickleFacts()
    try:
        if kind == "zip":
            with zipfile.ZipFile(path) as archive:
                member = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                if member is not None:
                    with archive.open(member) as stream:
                        _walk(stream, facts, pickles=1)
        elif kind == "pickle":
            with open(path, "rb") as stream:
                _walk(stream, facts, pickles=_MAX_PICKLES)
    except (OSError, zipfile.BadZipFile, RuntimeError):  # a damaged archive: whatever was seen stands
        pass
    return facts


def _walk(stream, facts: PickleFacts, pickles: int) -> None:
    memo: dict[int, object] = {}
    for _ in range(pickles):
        strings: list[object] = []  # values pushed lately; STACK_GLOBAL takes the last two
        try:
            for opcode, arg, _pos in pickletools.genops(stream):
                name = opcode.name
                if name == "PROTO":
                    facts.protocol = max(facts.protocol or 0, int(arg))
                elif name == "FRAME":
                    facts.framed = True
                elif name in _STRING_OPS:
                    strings.append(arg)
                elif name in ("BINGET", "LONG_BINGET", "GET"):
                    strings.append(memo.get(int(arg)))
                elif name in ("BINPUT", "LONG_BINPUT", "PUT") and strings:
                    memo[int(arg)] = strings[-1]
                elif name == "MEMOIZE" and strings:
                    memo[len(memo)] = strings[-1]
                elif name == "GLOBAL":
                    _add(facts, str(arg).replace(" ", "."))
                elif name == "STACK_GLOBAL" and len(strings) >= 2:
                    module, attr = strings[-2], strings[-1]
                    if isinstance(module, str) and isinstance(attr, str):
                        _add(facts, f"{module}.{attr}")
        except (ValueError, EOFError, UnicodeDecodeError, OverflowError, MemoryError):
            return  # past the last pickle (raw storage bytes) or a damaged stream


def _add(facts: PickleFacts, name: str) -> None:
    if name not in facts.names:
        facts.names.append(name)


def allowed_globals() -> set[str]:
    """The names torch's restricted unpickler accepts. torch keeps the list in a private
    function; if a later torch moves it, the fallback (torch's own namespace and
    collections.OrderedDict) only changes which name a message leads with, never what is loaded."""
    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        return set(_get_allowed_globals())
    except Exception:  # noqa: BLE001 - a private API; any failure means "use the fallback"
        return {"collections.OrderedDict"}


def refused_names(facts: PickleFacts) -> list[str]:
    """The globals a safe load would not admit, the telling ones first: a function call outside
    torch (`posix.system`, `builtins.exec`), then custom classes, then torch's own unsafe calls
    (`_load_from_bytes`)."""
    allowed = allowed_globals()
    bad = [n for n in facts.names if n not in allowed]
    return sorted(bad, key=lambda n: (n.startswith("torch."), n.rsplit(".", 1)[-1][:1].isupper()))


def torch_text(exc: BaseException) -> str:
    """torch's message without its sentences about itself, on one line; "" when nothing is left."""
    text = _TORCH_BOILERPLATE.sub(" ", str(exc))
    text = re.sub(r"\s+", " ", text).strip(" .;:")
    return text[:200]


def zip_problem(path: Path) -> str | None:
    """Why a zip-format torch file cannot be read, found before torch maps it (a cut-short file
    otherwise surfaces as torch's miniz text or a bare "OSError: Invalid argument" from mmap);
    None when the archive's directory is whole. Reads only the directory at the file's end."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except zipfile.BadZipFile:
        return ("the zip archive's central directory (written last) is missing, so the file was cut short "
                "(a truncated download or copy)")
    except OSError as exc:
        return f"it could not be read ({exc.strerror or exc})"
    size = path.stat().st_size
    past = [i.filename for i in infos if i.header_offset + i.compress_size > size]
    if past:
        return f"the zip archive lists {past[0]} past the end of the file (a truncated download or copy)"
    return None


def damage_detail(exc: BaseException) -> str | None:
    """Our words for torch's failures that mean "the file was cut short or damaged"."""
    text = str(exc)
    if isinstance(exc, EOFError):
        return "the file ends early, in the middle of its pickle (a truncated download or copy)"
    if "failed finding central directory" in text:
        return ("the zip archive's central directory (written last) is missing, so the file was cut short "
                "(a truncated download or copy)")
    if "PytorchStreamReader" in text or "miniz" in text:
        return f"its zip archive is damaged ({torch_text(exc).replace('PytorchStreamReader failed', 'failed')})"
    if "unexpected EOF" in text:
        return f"the file ends early ({torch_text(exc)}; a truncated download or copy)"
    return None
