"""The two kinds of exception every caller of gptcore must tell apart, as types.

Why a hierarchy and not names: the app used to recognise a cancellation by the class name
ending in "Cancelled" and a user error by a list of class names, which misses subclasses
and breaks silently on a rename. Every stop-on-request exception in gptcore (loading, init,
probes, patching) derives from `Cancelled`; every exception whose message already names
the problem and the fix (a bad config, an unloadable file, a build that will not fit)
derives from `UserError`. Callers classify with `isinstance`, cancellation first (a
cancelled load is also a `LoadError`).

Torch-free and import-free, so the app can classify errors before torch is imported.
"""
from __future__ import annotations


class Cancelled(Exception):
    """The caller's `cancel()` turned true and the work stopped; not a failure, show nothing."""


class UserError(ValueError):
    """Bad input, diagnosed: the message names what is wrong and how to fix it (shown where
    it happened, no traceback, no "unexpected error" dialog). `title` heads it in a dialog;
    subclasses name their kind of problem."""

    title = "Input not usable"


def is_cancellation(exc: BaseException) -> bool:
    return isinstance(exc, Cancelled)


def is_user_error(exc: BaseException) -> bool:
    """True for a diagnosed input problem (never for a cancellation)."""
    return isinstance(exc, UserError) and not isinstance(exc, Cancelled)
