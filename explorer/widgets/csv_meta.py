"""What an exported CSV was computed from, written above its header row.

A CSV of attribution scores means nothing without the model, the ablation in force and the
target it explains; the file is often read weeks later, away from the app. The facts go first
as `# key: value` lines, the convention numpy's savetxt and many tools use for comments:
pandas reads the table with `pd.read_csv(path, comment="#")`, a spreadsheet shows them as
the first rows. Values are kept on one line (a prompt's newlines become "\\n").
"""
from __future__ import annotations


def with_metadata(csv_text: str, meta: dict | None) -> str:
    """`csv_text` with `# key: value` lines in front, one per entry of `meta` (None skipped)."""
    lines = [f"# {key}: {_one_line(value)}\n" for key, value in (meta or {}).items() if value is not None]
    return "".join(lines) + csv_text


def _one_line(value) -> str:
    return str(value).replace("\r", "\\r").replace("\n", "\\n")
