"""The Train panel's settings: the form's defaults (nanoGPT's CPU recipe or train.py's own), a run's
settings read back from its run.json, a gptcore preset's, and the form turned into the command line.

Why apart from the controller: these are plain functions of dicts (no Qt), the one place that knows
how the form's names map to `python -m gptcore.train --key=value`, and testable without a window.
"""
from __future__ import annotations

from pathlib import Path


def form_defaults(preset: str = "cpu") -> dict:
    """The form's values: nanoGPT's CPU recipe (the default) or train.py's own defaults."""
    from gptcore.model.config import GPTConfig
    from gptcore.train import DEFAULT_PROBE_INTERVAL
    from gptcore.training.config import CPU_RECIPE_MODEL, TrainConfig

    train = TrainConfig.cpu_recipe() if preset == "cpu" else TrainConfig()
    model = GPTConfig(**CPU_RECIPE_MODEL) if preset == "cpu" else GPTConfig(dropout=0.0, bias=True)
    values = {**train.to_dict(), **{k: getattr(model, k) for k in ("n_layer", "n_head", "n_embd", "block_size",
                                                                  "bias", "dropout")}}
    values["probe_interval"] = DEFAULT_PROBE_INTERVAL
    return values


def command_settings(values: dict) -> dict:
    """The form's values as gptcore.train's --key=value settings; ValueError naming a bad one."""
    settings = {k: v for k, v in values.items() if k not in ("corpus", "path")}
    if not settings.get("init"):
        raise ValueError("tick at least one init scheme (gpt2 is nanoGPT's)")
    corpus, path = values.get("corpus", "pydoc"), values.get("path", "")
    if corpus in ("file", "folder"):
        if not path:
            raise ValueError(f"choose the {'text file' if corpus == 'file' else 'nanoGPT data folder'} with … "
                             f"(or pick the built-in pydoc topics)")
        p = Path(path).expanduser()
        if corpus == "file" and not p.is_file():
            raise ValueError(f"{p} is not a file; choose a UTF-8 text file")
        if corpus == "folder" and not (p / "train.bin").is_file():
            raise ValueError(f"{p} holds no train.bin; choose a folder made by nanoGPT's prepare.py")
        settings["data"] = str(p)
        if corpus == "folder":
            settings.pop("tokenizer", None)  # the folder's meta.pkl decides
    elif corpus == "induction":
        settings["preset"] = "induction"
    settings["gradient_accumulation_steps"] = max(1, int(settings.get("gradient_accumulation_steps", 1)))
    return settings


def run_form_values(meta: dict) -> dict:
    """The form's values of the run described by `meta` (run.json)."""
    values = {**(meta.get("model_config") or {}), **(meta.get("train_config") or {})}
    values["probe_interval"] = meta.get("probe_interval", values.get("probe_interval"))
    values["init"] = ",".join(meta.get("schemes") or ["gpt2"])
    kind = (meta.get("tokenizer") or {}).get("kind")
    if kind in ("char", "gpt2"):
        values["tokenizer"] = kind
    values["corpus"], values["path"] = run_corpus(meta)
    return values


def run_corpus(meta: dict) -> tuple[str, str]:
    """(the form's corpus choice, its path) of the run described by `meta`: its preset, the text
    file or nanoGPT data folder it read (run.json's corpus "source"), or the built-in pydoc topics."""
    if meta.get("preset"):
        return str(meta["preset"]), ""
    source = (meta.get("corpus") or {}).get("source")
    if not source:
        return "pydoc", ""
    return ("folder" if Path(source).is_dir() or not Path(source).suffix else "file"), str(source)


def induction_preset_available() -> bool:
    """Only when gptcore ships the preset and its command line takes --preset (issue 21's work)."""
    try:
        from gptcore.train import RUN_SETTINGS
        from gptcore.training.presets import PRESETS
    except Exception:  # noqa: BLE001 - absent or unfinished: the choice stays disabled
        return False
    return "preset" in RUN_SETTINGS and "induction" in PRESETS


def preset_values(name: str) -> dict:
    """The form's values of a gptcore training preset (so passing them on changes nothing)."""
    from gptcore.training.presets import PRESETS

    preset = PRESETS[name]
    model, train = preset.model_config(vocab_size=256), preset.train_config()
    values = {**train.to_dict(), **{k: getattr(model, k) for k in ("n_layer", "n_head", "n_embd", "block_size",
                                                                   "bias", "dropout")}}
    values["tokenizer"] = preset.tokenizer
    return values
