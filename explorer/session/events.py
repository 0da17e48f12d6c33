"""What the session announces: one typed event per kind of change, and the hub that sends them.

Why typed events: the session changes state (a load, a build, an ablation, a training step
shown), and every view must follow. When the window did the telling, each caller had to
remember to tell it, one `version` counter meant both "another model" and "same model,
other ablation", and views guessed which from a reason string. Now the session says what
happened, with what replaced what, and views decide from the type: a model swap clears
(the shape may differ), an ablation or a settings change marks out of date and recomputes,
a new training step recomputes with the same shape.

No Qt here (the session is headless). Events are sent on the thread that made the change
(often the compute thread): a Qt listener hands them to the GUI thread itself (see
explorer/controllers/context.py, `SessionSignals`). A listener that raises is logged and never undoes
the change or stops the other listeners.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Union

from explorer.session.results import AblationState, ModelInfo, feature_name

log = logging.getLogger("explorer")

MODEL_CHANGED = "cleared because the model changed"


class _Change:
    """What every event tells a view: `detail` (what happened, in words) and `reason` (the
    words a view puts next to what it marks out of date)."""

    @property
    def detail(self) -> str:
        raise NotImplementedError

    @property
    def reason(self) -> str:
        return f"out of date: {self.detail}"


@dataclass(frozen=True)
class ModelSwapped(_Change):
    """Another model (load or build): its shape, vocabulary and tokenizer may all differ;
    the ablation was cleared with the old one. Views clear what they show (`reason`)."""

    old: ModelInfo
    new: ModelInfo
    version: int

    @property
    def reason(self) -> str:
        return MODEL_CHANGED

    @property
    def detail(self) -> str:
        return f"the model changed ({self.old.name} → {self.new.name})"


@dataclass(frozen=True)
class AblationChanged(_Change):
    """Same model, other components knocked out: shapes stay, every number may change."""

    before: AblationState
    after: AblationState
    version: int

    @property
    def detail(self) -> str:
        """A feature edit is said as one ("feature 421 clamped at 10"), a head or MLP change as an ablation."""
        before, after = self.before, self.after
        if not after.active:
            return "the ablation was reset" if before.heads or before.mlps else "the feature edits were reset"
        if (before.heads, before.mlps, before.mode) == (after.heads, after.mlps, after.mode):
            return _feature_change(before.features, after.features)
        return f"the ablation changed (now {after.text()})"


def _feature_change(before: tuple, after: tuple) -> str:
    """What a change of the features held did, in words: the feature it set, or how many are held now."""
    was, now = dict(before), dict(after)
    changed = [(f, v) for f, v in now.items() if was.get(f) != v]
    if not now:
        return "the feature edits were reset"
    if len(changed) == 1 and set(was) <= set(now):
        feature, value = changed[0]
        name = feature_name(feature)
        return f"{name} ablated" if value == 0 else f"{name} clamped at {value:g}"
    return f"the feature edits changed (now {AblationState(features=after).features_text()})"


@dataclass(frozen=True)
class SettingsChanged(_Change):
    """A session setting every computation depends on changed (`what` names it)."""

    what: str
    version: int

    @property
    def detail(self) -> str:
        return f"{self.what} changed"


@dataclass(frozen=True)
class TrainingStepShown(_Change):
    """The same model with the weights of another training step (the Train panel shows a
    run every N steps): shapes stay, so views recompute without clearing."""

    step: int
    version: int

    @property
    def detail(self) -> str:
        return f"the weights moved to training step {self.step:,}"


SessionEvent = Union[ModelSwapped, AblationChanged, SettingsChanged, TrainingStepShown]
Listener = Callable[[SessionEvent], None]


class EventHub:
    """Listeners of one session. Thread-safe: subscribing and sending may happen on any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(event)` on every change from now on; returns the unsubscribe call."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def send(self, event: SessionEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a broken view must not undo or hide the change
                log.exception("a listener failed on %s", type(event).__name__)
