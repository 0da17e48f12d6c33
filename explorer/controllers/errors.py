"""Turn an exception into words a user can act on: a title, what happened, what to do.

No Qt here, so the command line and the tests can use the same explanations the error
dialog shows. Tracebacks go to the log file, never into the dialog.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from gptcore.errors import Cancelled, UserError

log = logging.getLogger("explorer")

OOM_ADVICE = (
    "Use the CPU instead (restart with `gpt-explorer --device cpu`), "
    "a smaller model (fewer layers, a narrower n_embd, or gpt2 instead of gpt2-xl), "
    "or a shorter prompt."
)


# The packages whose ValueErrors are deliberate: raised on bad input, worded for the user.
OUR_PACKAGES = ("gptcore", "explorer")
INPUT_TITLE = "Input not usable"


@dataclass(frozen=True)
class Explanation:
    title: str
    message: str
    input_problem: bool = False  # a diagnosed bad input: shown where it happened, no dialog needed
    words: str = ""  # the exception's own words (the inline form of a bug names them after the title)

    @property
    def inline(self) -> str:
        """The one line a panel shows where it happened: the diagnosis itself for an input
        problem (its advice paragraphs are for the dialog), "Title: what it said" for a bug."""
        if self.input_problem:
            return self.message.split("\n\n")[0]
        return f"{self.title}: {self.words or self.message.splitlines()[0]}"


def raised_by_our_code(exc: BaseException) -> bool:
    """True when the innermost frame of `exc`'s traceback belongs to gptcore or explorer.

    Why: a ValueError we raise on purpose (a token outside the vocabulary, CUDA asked for
    without a GPU, a bad generation setting) already names the problem and the fix, while
    one raised inside numpy or torch is a bug of ours and stays an "Unexpected error".
    Without a traceback nothing says where it came from, so it counts as unexpected."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__") or ""
    return module.split(".")[0] in OUR_PACKAGES


def _is_cuda_oom(exc: BaseException) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower() and "cuda" in str(exc).lower()


def explain(exc: BaseException | str, log_path: str | None = None) -> Explanation:
    if isinstance(exc, str):
        return Explanation("Error", exc)
    text = str(exc).strip() or type(exc).__name__
    name = type(exc).__name__
    if isinstance(exc, Cancelled):  # not a failure; callers normally say nothing at all
        return Explanation("Cancelled", text, input_problem=True)
    if _is_cuda_oom(exc):
        first = text.splitlines()[0]
        return Explanation("Out of GPU memory", f"The GPU ran out of memory ({first}).\n\n{OOM_ADVICE}", words=first)
    if isinstance(exc, MemoryError):
        return Explanation("Out of memory", f"The computer ran out of memory.\n\n{OOM_ADVICE}")
    if isinstance(exc, UserError):  # ConfigError, LoadError, BuildRefused… each names its kind
        return Explanation(exc.title, text, input_problem=True)
    tokenizer = sys.modules.get("gptcore.io.tokenizer")  # not imported: exc cannot be one of its errors
    if tokenizer is not None and isinstance(exc, tokenizer.TokenizerError):
        return Explanation("Tokenizer problem", text, words=text)
    if isinstance(exc, OSError) and getattr(exc, "filename", None):  # the disk said no: not a bug of ours
        reason = exc.strerror or text
        return Explanation("File not usable", f"{reason}: {exc.filename}\n\nPick a file or folder you can "
                           "read and write (and check the disk is not full).", input_problem=True)
    if isinstance(exc, ValueError) and raised_by_our_code(exc):
        return Explanation(INPUT_TITLE, text, input_problem=True)
    where = f"\n\nThe full report is in the log file:\n{log_path}" if log_path else ""
    return Explanation("Unexpected error", f"{name}: {text}{where}\n\nThe app is still running.", words=text)


def log_exception(title: str, exc: BaseException | str, *, traceback: bool = True) -> None:
    """One log line for every error the user sees, with its traceback unless `traceback` is False
    (an expected state, such as "no SAE trained yet", is no bug: its words are the whole story)."""
    if isinstance(exc, BaseException):
        trace = (type(exc), exc, exc.__traceback__) if traceback else None
        log.error("%s: %s: %s", title, type(exc).__name__, exc, exc_info=trace)
    else:
        log.error("%s: %s", title, exc)
