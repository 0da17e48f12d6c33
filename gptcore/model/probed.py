"""A fast path that is checked once before it is trusted (linear.py's oneDNN linear, packed_bf16.py's
packed bf16 product): decided lazily at first use under a lock, decided again after `forget()`
(a test or a changed GPTCORE_ONEDNN), and given up for the rest of the process, logged once,
when a call fails where the plain path (F.linear) would not.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Generic, Optional, TypeVar

T = TypeVar("T")
_UNPROBED = object()


class ProbedPath(Generic[T]):
    """`decide()` returns the fast path (an op, or True) or None for the plain path."""

    def __init__(self, decide: Callable[[], Optional[T]], name: str, fallback: str, log: logging.Logger):
        self._decide, self._name, self._fallback, self._log = decide, name, fallback, log
        self._value: object = _UNPROBED
        self._lock = threading.Lock()

    def get(self) -> Optional[T]:
        """The fast path if this process may use it, else None. Decided once, at first use."""
        value = self._value
        if value is not _UNPROBED:
            return value  # type: ignore[return-value]
        with self._lock:
            if self._value is _UNPROBED:
                self._value = self._decide()
            return self._value  # type: ignore[return-value]

    def forget(self) -> None:
        with self._lock:
            self._value = _UNPROBED

    def give_up(self, exc: Exception) -> None:
        with self._lock:
            if self._value is None:
                return
            self._value = None
        self._log.warning("%s raised %s: %s; %s from now on", self._name, type(exc).__name__, exc, self._fallback)
