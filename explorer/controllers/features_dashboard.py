"""The Features panel's dashboard half (issue 39, split from controllers/features.py along this seam):
every feature's density histogram when a table arrives; for the selected feature its example groups,
nearest features and logits histogram (`session.features.dashboard`, one task, asked again when the
context width changes); and the feature's dashboard exported as SAEDashboard's or Neuronpedia's JSON,
built from exactly what the panel shows.

A mixin of FeaturesController, which provides `view`, `ctx`, `submit`, `report_error`, `table`, `detail`,
`selected`, `export_meta` and the `dashboarded` signal; nothing here is used alone.
"""
from __future__ import annotations

import json
from pathlib import Path

DASHBOARD_KEY = "features-dashboard"
JSON_KINDS = {"saedashboard-json": "saedashboard", "neuronpedia-json": "neuronpedia"}


class FeatureDashboardPart:
    dashboard = None  # the FeatureDashboard on screen

    def _show_density(self, table) -> None:
        """The histogram of every feature's density: O(width) numpy on the table just drawn."""
        from explorer.session.features.dashboard import density_histogram

        h = density_histogram(table.density, table.tokens)
        self.view.set_density(h.edges, h.counts, h.dead, h.dense, h.dense_at, h.features, h.tokens)

    def _ask_dashboard(self, feature: int) -> None:
        table, session = self.table, self.ctx.session
        if table is None or not 0 <= feature < len(table.density):
            return
        before, after = self.view.context_width()
        self.submit(DASHBOARD_KEY, lambda token, _p: session.features.dashboard(int(feature), before, after),
                    on_result=self._show_dashboard, on_error=self._dashboard_failed)

    def _context_changed(self, _before: int, _after: int) -> None:
        if self.selected is not None:
            self._ask_dashboard(self.selected)

    def _show_dashboard(self, dash) -> None:
        self.dashboard = dash
        groups = [(g.name, [(list(e.tokens), e.acts, e.qualifying) for e in g.examples]) for g in dash.groups]
        density = float(self.table.density[dash.feature]) if self.table is not None else 0.0
        self.view.set_dashboard(dash.feature, density, groups, dash.neighbour_ids, dash.neighbour_cosines,
                                list(dash.neighbour_labels))
        self.dashboarded.emit(dash)

    def _dashboard_failed(self, exc: BaseException) -> None:
        self.view.set_error(self.report_error(exc, "Feature dashboard not shown").inline)

    # -- export ---------------------------------------------------------------------------------------
    def dashboard_json(self, kind: str) -> dict:
        """The shown feature's dashboard in `kind`'s layout ("saedashboard-json" | "neuronpedia-json"),
        from the table, detail and dashboard on screen; ValueError while they are not all of one feature."""
        from explorer.session.features import neuronpedia

        table, detail, dash = self.table, self.detail, self.dashboard
        if table is None or detail is None or dash is None or dash.feature != detail.feature:
            raise ValueError("nothing to export yet: wait for the selected feature's examples and nearest features")
        model_id = neuronpedia.model_slug(self.ctx.session.info.name)
        if JSON_KINDS[kind] == "saedashboard":
            data = neuronpedia.saedashboard_batch(model_id, table, detail, dash)
        else:
            data = neuronpedia.neuronpedia_feature(model_id, table, detail, dash)
        data["metadata"] = self.export_meta()  # which model, edits and text the numbers are of
        return data

    def _json_writer(self, kind: str):
        def write(path: str):
            text = json.dumps(self.dashboard_json(kind), ensure_ascii=False, indent=1)
            Path(path).write_text(text, encoding="utf-8")

        return write

    def _json_name(self, kind: str) -> str:
        feature = "" if self.detail is None else f"-{self.detail.feature}"
        return f"feature{feature}-{JSON_KINDS[kind]}.json"
