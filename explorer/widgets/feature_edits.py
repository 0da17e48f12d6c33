"""The edit row of a feature's detail, said once for the Features panel (an SAE latent or a neuron) and the
Circuits panel (a transcoder feature): a value, Clamp and Ablate for the feature shown, then the edits in
force (red while any is) and Reset. Passive: the owner says which feature is shown and what is in force;
the row says what the user asked for."""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QPushButton, QWidget

from explorer.widgets.elided_label import ElidedLabel

EDITS_NONE = "no feature edited"


class FeatureEditRow(QWidget):
    """`feature` is the owner's key for the feature shown (an index, or a (layer, index) pair), None while
    none is (the value, Clamp and Ablate are then disabled). A subclass declares `editRequested` with the
    key's parts then the value (0 ablates): Signal(int, float) for an index, Signal(int, int, float) for a pair."""

    editRequested: Signal
    resetEditsRequested = Signal()

    def __init__(self, value_tip: str, clamp_tip: str, ablate_tip: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.feature = None
        self.value = QDoubleSpinBox()
        self.value.setRange(-9999.0, 9999.0)
        self.value.setDecimals(2)
        self.value.setValue(5.0)
        self.value.setToolTip(value_tip)
        self.clamp = QPushButton("Clamp")
        self.clamp.setToolTip(clamp_tip)
        self.clamp.clicked.connect(lambda: self._request(float(self.value.value())))
        self.ablate = QPushButton("Ablate")
        self.ablate.setToolTip(ablate_tip)
        self.ablate.clicked.connect(lambda: self._request(0.0))
        self.edits = ElidedLabel()
        self.reset = QPushButton("Reset")
        self.reset.setToolTip("Remove every feature edit: the model runs unedited again")
        self.reset.clicked.connect(self.resetEditsRequested)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.value)
        row.addWidget(self.clamp)
        row.addWidget(self.ablate)
        row.addWidget(self.edits, 1)
        row.addWidget(self.reset)
        self.set_feature(None)
        self.set_edits("")

    def set_feature(self, feature) -> None:
        self.feature = feature
        for widget in (self.value, self.clamp, self.ablate):
            widget.setEnabled(feature is not None)

    def set_edits(self, text: str) -> None:
        self.edits.setText(text or EDITS_NONE)
        self.edits.setStyleSheet("color: #dc2626; font-weight: 600;" if text else "color: #8c8c8c;")
        self.reset.setEnabled(bool(text))

    def _request(self, value: float) -> None:
        if self.feature is not None:
            key = self.feature if isinstance(self.feature, tuple) else (self.feature,)
            self.editRequested.emit(*key, value)
