"""Config controller: form edits -> closed-form parameter readout; Build -> a new model.

Counting is closed form (gptcore.count_parameters allocates nothing), so the readout is
recomputed synchronously on every edit, even for gpt2-xl. Building runs in a worker under
the runner's model key (a build and a load supersede each other), is refused up front
when the estimate exceeds free memory, and swaps the model into the session.
"""
from __future__ import annotations

import dataclasses
import json

from PySide6.QtCore import QObject

from gptcore.model.config import GPT2_VOCAB, PRESETS, ConfigError, GPTConfig
from gptcore.model.config import describe_parts, preset_name
from gptcore.model.params import count_parameters, format_bytes, format_count, modern_differences

from explorer.controllers.context import PanelContext, any_state
from explorer.views.config.panel import ConfigPanel
from explorer.views.config.param_readout import ComponentRow, ParamReadout
from explorer.runtime.workers import MODEL_TASK
from explorer.controllers.base import PanelController
from explorer.views.config.protocol import ConfigView

PRESET_ORDER = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2")
SETTINGS_KEY = "config_panel"


def readout_for(cfg: GPTConfig) -> ParamReadout:
    """The panel's plain-number view of count_parameters(cfg)."""
    count = count_parameters(cfg)
    comps = count.by_component
    return ParamReadout(
        total=count.total, total_text=format_count(count.total), tied=count.tied,
        tied_total=count.tied_total, untied_total=count.untied_total, tie_saving=count.tie_saving,
        vocab_size=cfg.vocab_size, n_embd=cfg.n_embd, n_layer=cfg.n_layer, per_block=count.per_block,
        non_embedding=count.non_embedding,
        kaplan_non_embedding=count.total - comps["token embedding"].total - comps["position embedding"].total
        - comps["output head"].total,
        components=tuple(ComponentRow(c.name, c.per_block, c.total, c.in_blocks) for c in comps.values()),
        parts=describe_parts(cfg), differences=tuple(modern_differences(cfg)),
        memory=(
            ("weights fp32", format_bytes(count.memory_bytes("fp32"))),
            ("weights bf16", format_bytes(count.memory_bytes("bf16"))),
            ("Adam training fp32", format_bytes(count.training_bytes("fp32"))),
            ("Adam, bf16 weights + fp32 moments", format_bytes(count.training_bytes("bf16", "fp32"))),
        ),
    )


def preset_of(values: dict) -> str | None:
    """The preset these form values equal (dropout aside), if any; None for invalid values too."""
    try:
        return preset_name(GPTConfig(**values))
    except (ConfigError, TypeError, ValueError):
        return None


class ConfigController(PanelController[ConfigView]):
    view_class = ConfigPanel

    def __init__(self, ctx: PanelContext, view: ConfigView, parent: QObject | None = None):
        super().__init__(ctx, view, parent)
        from gptcore.model.init import INIT_SCHEMES

        panel = view
        self.config: GPTConfig = GPTConfig.preset("gpt2")  # last valid config in the form
        panel.set_presets([p for p in PRESET_ORDER if p in PRESETS])
        saved = self._load_settings()
        panel.set_init_schemes(INIT_SCHEMES, saved.get("init_scheme", "gpt2"))
        if isinstance(saved.get("seed"), int):
            panel.set_seed(saved["seed"])
        panel.configEdited.connect(self.on_edited)
        panel.presetChosen.connect(self.on_preset)
        panel.buildRequested.connect(self.on_build)
        panel.buildCancelled.connect(self.cancel_build)
        panel.trainRequested.connect(self.on_train)
        self._build_outcome: str | None = None  # "built" / "failed" once the running build ended
        session = ctx.session
        if session is not None and session.has_model:
            self._show_loaded_model()
        else:
            self.show_config(self.config)
        self.mark_ready()  # the readout is drawn synchronously, here

    def focus_form(self) -> None:
        self.view.focus_form()

    # -- readout ---------------------------------------------------------------------------------
    def show_config(self, cfg: GPTConfig) -> None:
        values = dataclasses.asdict(cfg)  # every field (to_dict leaves out modern parts at GPT-2's value)
        self.view.set_values(values, preset_of(values))
        self.on_edited(values)

    def on_edited(self, values: dict) -> None:
        try:
            cfg = GPTConfig(**values)
        except ConfigError as exc:
            self.view.set_field_error(exc.field, str(exc))
            return
        except (TypeError, ValueError) as exc:  # a value of the wrong type that validation did not name
            self.view.set_field_error(next(iter(values)), str(exc))
            return
        self.config = cfg
        self.view.set_field_error(None)
        self.view.set_preset(preset_of(values))
        self.view.set_readout(readout_for(cfg))
        ids = self._tokenizer_ids()
        if cfg.vocab_size < ids:
            self.view.set_field_warning(
                "vocab_size", f"vocab_size {cfg.vocab_size:,} is below the tokenizer's {ids:,} ids: a model built "
                f"with it can only read text whose tokens are all below {cfg.vocab_size:,} — Attention and "
                f"Generation will name any other token. Fine for a toy model; {ids:,} covers every token.")
        else:
            self.view.set_field_warning(None)

    def _tokenizer_ids(self) -> int:
        session = self.ctx.session
        if session is None:
            return GPT2_VOCAB
        from explorer.session.models import tokenizer_vocab

        return tokenizer_vocab(session)

    def on_preset(self, name: str) -> None:
        self.show_config(GPTConfig.preset(name))

    # -- building ----------------------------------------------------------------------------------
    def on_build(self, scheme: str, seed) -> None:
        from explorer.runtime.devices import BuildRefused
        from explorer.session import models

        session, cfg = self.ctx.session, self.config
        self._save_settings(scheme, seed)
        if session is None:
            self.view.set_build_status("The app is still starting; try again in a moment.", error=True)
            return
        try:
            models.check_fits(cfg, session.device)
        except BuildRefused as exc:
            self.view.set_build_status(f"Not built: {self.report_error(exc, 'Build refused').message}", error=True)
            return
        self.view.set_build_busy(True)
        self._build_outcome = None
        preset = preset_of(cfg.to_dict())
        name = f"{preset} shape ({scheme} init)" if preset else None  # None: the session names the shape
        self.view.set_build_status(f"Building {format_count(count_parameters(cfg).total)} parameters…")

        def work(token, progress):
            return session.build(cfg.to_dict(), scheme, seed, progress, name=name, cancel=token)

        # A build changes the state itself (it swaps the model in): its outcome is for any state.
        self.submit(MODEL_TASK, work, still_current=any_state, on_result=self._built, on_error=self._build_failed,
                    on_progress=self.view.set_build_progress, on_finished=self._build_finished)

    def on_train(self) -> None:
        """"Train this config…": the Train panel takes the last valid config of the form."""
        if self.ctx.window is not None:
            self.ctx.window.open_train(self.config.to_dict())

    def cancel_build(self) -> None:
        """Stop the build between two layers; the current model stays."""
        self.ctx.runner.cancel(MODEL_TASK)
        self.view.set_build_status("Cancelling…")

    def _build_finished(self) -> None:
        """Neither built nor failed: cancelled (here or in the status bar) or superseded by a load."""
        self.view.set_build_busy(False)
        if self._build_outcome is None:
            session = self.ctx.session
            current = session.info.name if session is not None and session.has_model else "none yet"
            self.view.set_build_status(f"Build cancelled; the current model ({current}) stays.")

    def _built(self, info) -> None:
        self._build_outcome = "built"
        self.view.set_build_status(f"Built {info.name}: {info.n_params:,} parameters on {info.device}.")

    def _build_failed(self, exc: BaseException) -> None:
        self._build_outcome = "failed"
        expl = self.report_error(exc, "Build failed")
        self.view.set_build_status(f"Not built: {expl.message}", error=True)

    # -- model swaps, settings -------------------------------------------------------------------------
    def on_model_changed(self, event) -> None:
        """Another model (this panel's Build, a load): the form shows its config, and the last
        build's line goes (a "Built …" line under a loaded checkpoint would be a lie). The
        panel's own Build writes its line after this: the swap is announced before the build returns."""
        if not self.ctx.runner.is_running(MODEL_TASK):
            self.view.set_build_busy(False)  # a Build superseded by a load gets no on_finished of its own
        self.view.set_build_status("")
        self._show_loaded_model()

    def on_settings_changed(self, event) -> None:
        """An ablation or a setting changes no config: the form keeps the user's edits."""

    def _show_loaded_model(self) -> None:
        info = self.ctx.session.info
        kind = info.status_word
        self.view.set_loaded_model(
            f"Current model: <b>{info.name}</b> — {kind}, {info.n_params:,} parameters on {info.device}. "
            f"The form shows its config; edit it to explore, then Build."
            + (f" <b>Head count:</b> {info.heads_note}." if info.heads_note else ""))
        if info.config:
            self.show_config(GPTConfig.from_dict(info.config))

    def _load_settings(self) -> dict:
        settings = self.ctx.settings
        if settings is None:
            return {}
        try:
            saved = json.loads(settings.value(SETTINGS_KEY, "{}") or "{}")
        except (TypeError, ValueError):
            return {}
        return saved if isinstance(saved, dict) else {}  # a damaged settings file must not break the panel

    def _save_settings(self, scheme: str, seed) -> None:
        settings = self.ctx.settings
        if settings is not None:
            settings.setValue(SETTINGS_KEY, json.dumps({"init_scheme": scheme, "seed": -1 if seed is None else seed}))
