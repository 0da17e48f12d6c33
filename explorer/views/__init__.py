"""One passive view per panel (a sub-package each): data in through setters, intent signals out. Never torch, gptcore or the session.

Beside each view, `protocol.py` declares what its controller may ask of it: the signals it emits
(intent, out) and the setters and getters the controller calls (data, in). That is the whole
conversation: the controller is typed against it (`PanelController[AttentionView]`), and
tests/explorer/test_view_protocols.py checks that the view offers all of it and the controller
touches nothing of its view outside it. A fake view for a controller test needs only the protocol.
"""
from __future__ import annotations

from typing import Any

Signal = Any  # a bound Qt signal in a protocol: .connect(slot) / .emit(...)
