"""controllers/dictionary_panel.py is shared by the Features and Circuits controllers, so the protocol
guard (tests/explorer/test_view_protocols.py, which reads controllers/<panel>.py and <panel>_*.py) does
not read it: here it is held to what both views' protocols declare, and its methods are the ones both
controllers run."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.explorer.test_view_protocols import VIEW_PROTOCOLS, _outside, _uses

SHARED = Path(__file__).resolve().parents[2] / "explorer" / "controllers" / "dictionary_panel.py"


@pytest.mark.parametrize("panel", ["features", "circuits"])
def test_the_shared_part_uses_only_what_each_view_protocol_declares(panel):
    uses = _uses(SHARED.read_text(encoding="utf-8"))
    assert uses.used >= {"set_corpus_choices", "set_training", "set_progress", "set_error"}  # the scan sees it
    assert _outside(uses, VIEW_PROTOCOLS[panel]) == []


def test_the_guard_would_catch_a_reach_into_a_view_of_the_shared_part():
    reach = SHARED.read_text(encoding="utf-8") + "\n\ndef f(self):\n    self.view.form.train.click()\n"
    assert all(_outside(_uses(reach), VIEW_PROTOCOLS[panel]) for panel in ("features", "circuits"))


@pytest.mark.qt  # imports the controllers
def test_both_controllers_run_the_shared_part():
    from explorer.controllers.circuits import CircuitsController
    from explorer.controllers.dictionary_panel import DictionaryPanelPart
    from explorer.controllers.features import FeaturesController

    for controller in (FeaturesController, CircuitsController):
        for name in ("set_prompt", "_offer_corpora", "_progress", "_training_ended", "_browse", "reset_edits",
                     "export"):
            assert getattr(controller, name) is getattr(DictionaryPanelPart, name), (controller.__name__, name)
        assert controller.background_keys == controller.training_keys and len(controller.training_keys) == 2
