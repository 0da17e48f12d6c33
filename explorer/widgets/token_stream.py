"""The generated text, one coloured span per token, with the alternatives on hover.

Why a QTextEdit and our own hover handling: the text must wrap and select like text,
yet every token is a unit the user asks about ("what else could have come here?").
We keep each token's character range, find the token under the mouse with
`cursorForPosition`, and build its tooltip ourselves, so the lookup is testable
without a real mouse (`token_index_at`, `tooltip_at`).

Colour = how likely the token was when it was drawn, in five bins on a log-like scale
(most sampled tokens sit between 1% and 90%, so equal-width bins would paint nearly all
of them alike). The same bins colour the distribution bars.
"""
from __future__ import annotations

import functools

import bisect
import html
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QColor, QPainter, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QTextEdit, QToolTip, QWidget

from explorer.widgets.formatting import format_prob

# (lower bound of the bin, background colour, legend text), from the most likely down.
PROBABILITY_BINS = (
    (0.5, "#7fd18b", "≥ 50%"),
    (0.2, "#c3e88d", "20–50%"),
    (0.05, "#ffe082", "5–20%"),
    (0.01, "#ffb074", "1–5%"),
    (0.0, "#ff8a80", "< 1%"),
)
TOKEN_TEXT_COLOUR = "#1b1b1b"  # dark text on every (light) bin colour, whatever the theme
PROMPT_COLOUR = "#8c8c8c"  # mid grey: reads on the light and the dark theme
NOTE_COLOUR = "#b8860b"


def probability_colour(prob: float) -> str:
    for lower, colour, _ in PROBABILITY_BINS:
        if prob >= lower:
            return colour
    return PROBABILITY_BINS[-1][1]


@functools.lru_cache(maxsize=65536)
def visible_token(text: str) -> str:
    """A token as a label: leading/trailing spaces as '␣', newlines as '↵', tabs as '→',
    other control characters as their Control Pictures glyph, so no label is blank.
    Memoised: a redraw relabels every token of the prompt (1024 at most), and they repeat."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == " ":
            out.append("␣")
        elif ch == "\n":
            out.append("↵")
        elif ch == "\t":
            out.append("→")
        elif code < 0x20:
            out.append(chr(0x2400 + code))
        elif code == 0x7F:
            out.append("␡")
        else:
            out.append(ch)
    return "".join(out) if out else "∅"


def printable_text(text: str) -> str:
    """Running text for the stream: newlines and tabs stay, other control characters
    (which a text view would swallow or render as boxes) become visible glyphs."""
    return "".join(
        chr(0x2400 + ord(ch)) if (ord(ch) < 0x20 and ch not in "\n\t") else ("␡" if ch == "\x7f" else ch)
        for ch in text
    )


@dataclass(frozen=True)
class StreamToken:
    text: str
    prob: float
    alternatives: tuple[tuple[str, float], ...]  # (token text, probability), most likely first


class TokenStreamView(QTextEdit):
    """Read-only text: the (cropped) prompt in grey, then the generated tokens."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setMouseTracking(True)
        self.setAcceptRichText(False)
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 1.2)  # the text is the point of the pane
        self.setFont(font)
        self.hint = "Generated text appears here, token by token. Ctrl+Enter generates, Esc stops."
        self._starts: list[int] = []  # character offset where each token begins
        self._ends: list[int] = []
        self._tokens: list[StreamToken] = []

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """The hint while empty, wrapped to the width: QTextEdit's own placeholder is one line,
        cut at "…Ctrl+Enter" in a 900-px window, which hid how to start and stop."""
        super().paintEvent(event)
        if self.document().isEmpty():
            painter = QPainter(self.viewport())
            painter.setPen(self.palette().placeholderText().color())
            m = int(self.document().documentMargin())
            painter.drawText(self.viewport().rect().adjusted(m, m, -m, -m),
                             int(Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextWordWrap), self.hint)
            painter.end()

    # -- content ---------------------------------------------------------------------
    def start(self, prompt_text: str, note: str = "") -> None:
        """Clear, then show what the model reads: an optional note, then the prompt."""
        self.clear()
        self._starts, self._ends, self._tokens = [], [], []
        cursor = self._end_cursor()
        if note:
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(NOTE_COLOUR))
            fmt.setFontItalic(True)
            cursor.insertText(note + "\n", fmt)
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(PROMPT_COLOUR))
        cursor.insertText(printable_text(prompt_text), fmt)

    def append_token(self, token: StreamToken) -> None:
        cursor = self._end_cursor()
        start = cursor.position()
        fmt = QTextCharFormat()
        fmt.setBackground(QColor(probability_colour(token.prob)))
        fmt.setForeground(QColor(TOKEN_TEXT_COLOUR))
        cursor.insertText(printable_text(token.text), fmt)
        self._starts.append(start)
        self._ends.append(cursor.position())
        self._tokens.append(token)
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())  # follow the stream

    def tokens(self) -> list[StreamToken]:
        return list(self._tokens)

    def generated_text(self) -> str:
        return "".join(t.text for t in self._tokens)

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    # -- hover -----------------------------------------------------------------------
    def token_index_at(self, pos: QPoint) -> int | None:
        """Index of the generated token under viewport point `pos`, or None."""
        if not self._starts:
            return None
        cursor = self.cursorForPosition(pos)
        char = cursor.position()
        # cursorForPosition returns the nearest gap between characters; the character
        # under the mouse is the one after it unless the mouse is on its right half.
        rect = self.cursorRect(cursor)
        if pos.x() < rect.center().x() and char > 0:
            char -= 1
        i = bisect.bisect_right(self._starts, char) - 1
        if i >= 0 and self._starts[i] <= char < self._ends[i]:
            return i
        return None

    def tooltip_for(self, index: int) -> str:
        """The token, its probability, and every candidate it was drawn against, most
        likely first, with the drawn one marked: its rank shows whether it was the
        favourite or a long shot."""
        token = self._tokens[index]
        rows = [f"<b>{html.escape(visible_token(token.text))}</b> — drawn with p = {format_prob(token.prob)}"]
        others = [(text, p) for text, p in token.alternatives if text != token.text]
        if not others:
            rows.append("<br><i>no other candidate was possible under these settings</i>")
            return "".join(rows)
        rows.append("<br><i>the candidates it was drawn against:</i>")
        rows.append("<table cellspacing='0' cellpadding='1'>")
        marked = False
        for text, p in token.alternatives:
            chosen = not marked and text == token.text
            marked = marked or chosen
            label = html.escape(visible_token(text))
            if chosen:
                rows.append(f"<tr><td>▶</td><td><b>{label}</b></td><td align='right'>&nbsp;<b>{format_prob(p)}</b></td></tr>")
            else:
                rows.append(f"<tr><td></td><td>{label}</td><td align='right'>&nbsp;{format_prob(p)}</td></tr>")
        rows.append("</table>")
        return "".join(rows)

    def tooltip_at(self, pos: QPoint) -> str:
        i = self.token_index_at(pos)
        return "" if i is None else self.tooltip_for(i)

    def viewportEvent(self, event) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            tip = self.tooltip_at(event.pos())
            if tip:
                QToolTip.showText(event.globalPos(), tip, self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)


class ProbabilityLegend(QWidget):
    """'probability when drawn:' followed by the five coloured bins."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(QLabel("probability when drawn:"))
        for _, colour, text in PROBABILITY_BINS:
            swatch = QLabel(text)
            swatch.setAlignment(Qt.AlignmentFlag.AlignCenter)
            swatch.setStyleSheet(
                f"background: {colour}; color: {TOKEN_TEXT_COLOUR}; padding: 1px 6px; border-radius: 3px;"
            )
            layout.addWidget(swatch)
        layout.addStretch(1)
