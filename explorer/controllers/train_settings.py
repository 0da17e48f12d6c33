"""The Train panel's settings and words: the form's defaults (nanoGPT's CPU recipe or train.py's own), a
run's settings read back from its run.json, a gptcore preset's, the form turned into the command line,
and the run's state and rate as the progress line says them.

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


def run_state_word(follower, running: bool, paused: bool, stopping: bool, exit_code: int | None) -> str:
    """The run's state in one word: the child process's when it runs (paused, stopping…, starting,
    running), how it ended when it ended before its trace said so (refused: exit 2 before writing
    anything; failed; stopped), else the trace's own (finished, stopped, failed, running)."""
    f = follower
    if running:
        if paused:
            return "paused"
        return "stopping…" if stopping else ("starting" if f is None or f.state == "waiting" else "running")
    if f is not None and exit_code is not None and not f.finished:
        if f.state == "waiting":
            return "refused" if exit_code == 2 else "failed"
        return "stopped" if exit_code in (0, 130) else "failed"
    return {"waiting": "waiting for the run to start", "running": "running", "done": "finished",
            "stopped": "stopped", "error": "failed"}[f.state] if f is not None else "no run"


def rate_text(follower, running: bool, paused: bool, rss: int, pid: int) -> str:
    """"1,000 tokens/s · ETA 2 min 05 s · peak memory 347 MB" (no ETA while paused or not running)."""
    tokens_s, left = follower.rate()
    rate = f"{tokens_s:,.0f} tokens/s" if tokens_s else ""
    if left and follower.state == "running" and not paused:
        rate += f" · ETA {duration(left)}"
    if follower.memory_mb is not None:  # the run's own figure: also for a run started elsewhere
        rate += f" · peak memory {follower.memory_mb:,.0f} MB"
    elif running:
        rate += f" · child {rss / 2**20:,.0f} MiB" if rss else f" · child pid {pid}"
    return rate


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"
