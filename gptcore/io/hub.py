"""GPT-2 checkpoints from the Hugging Face hub: known ids, the local cache, downloads with progress.

The cache is read first and without network (a GPT-2 snapshot never changes), so a cached model
loads offline and instantly; only a miss downloads. Only `config.json` and safetensors files are
fetched: pickled weights from the internet are never downloaded.

huggingface_hub reads `HF_HUB_CACHE`/`HF_HOME`/`HF_HUB_OFFLINE` once, when it is first imported.
A program (or a test) that sets them later would be ignored, so this module reads the environment
on every call and passes `cache_dir` explicitly.
"""
from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from gptcore.io.checkpoints import LoadCancelled, LoadError

# Short names people type, in menu order; each maps to the repository that holds it today.
HUB_IDS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2")
HUB_REPOS = {
    "gpt2": "openai-community/gpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
    "gpt2-large": "openai-community/gpt2-large",
    "gpt2-xl": "openai-community/gpt2-xl",
    "distilgpt2": "distilbert/distilgpt2",
}
# A model's own tokenizer (JSON, safe to read); not fetched for the GPT-2 repos, whose BPE ships offline.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TRUE = {"1", "ON", "YES", "TRUE"}
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")

ProgressFn = Callable[[int, int, str], None]


def is_hub_id(source: str) -> bool:
    """A known short id, or something shaped like `org/name` (checked only when no such path exists)."""
    return source in HUB_REPOS or (bool(_REPO_ID.match(source)) and not source.endswith((".pt", ".bin", ".safetensors", ".json")))


def repo_candidates(model_id: str) -> list[str]:
    """Repositories to look for in the cache: the current name first, then the legacy one
    (`gpt2` was a top-level repo before it moved under `openai-community/`; old caches use it)."""
    canonical = HUB_REPOS.get(model_id, model_id)
    legacy = [short for short, repo in HUB_REPOS.items() if repo == canonical]
    return list(dict.fromkeys([canonical, *legacy]))


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps models, from the environment as it is now."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def hub_offline() -> bool:
    return any(os.environ.get(name, "").upper() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """Can a connection to the hub be opened? Without network huggingface_hub retries for ~30 s
    before giving up; a 3 s probe turns that into a prompt answer. Behind a proxy (which only the
    HTTP client knows how to use) the probe is skipped."""
    if any(os.environ.get(name) for name in _PROXY_VARS):
        return True
    url = urlsplit(endpoint)
    try:
        with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout):
            return True
    except (OSError, ValueError):
        return False


def cached_snapshot(model_id: str) -> Path | None:
    """The cached snapshot folder holding config.json and complete safetensors weights, if any."""
    from huggingface_hub import try_to_load_from_cache

    cache = hub_cache_dir()
    for repo in repo_candidates(model_id):
        config = try_to_load_from_cache(repo, "config.json", cache_dir=cache)
        if isinstance(config, str) and _has_weights(Path(config).parent):
            return Path(config).parent
    return None


def _has_weights(folder: Path) -> bool:
    if (folder / "model.safetensors").is_file():
        return True
    index = folder / "model.safetensors.index.json"
    try:
        shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return all((folder / str(s)).is_file() for s in shards)


def is_hub_cached(model_id: str) -> bool:
    """True when `load(model_id)` would succeed without network (no network is used to tell)."""
    try:
        return cached_snapshot(str(model_id)) is not None
    except (ValueError, OSError):  # not a valid repo id / unreadable cache
        return False


def not_cached(model_id: str, reason: str) -> LoadError:
    return LoadError(
        f"{model_id} is not cached (looked in {hub_cache_dir()}) and {reason}. Run once with network to "
        f"download it (unset HF_HUB_OFFLINE if it is set), or point at a local folder (config.json + "
        f"model.safetensors) or a .safetensors / ckpt.pt file"
    )


def fetch(model_id: str, progress: ProgressFn | None = None, cancel: Callable[[], bool] | None = None) -> Path:
    """Snapshot folder for `model_id`: from the cache, else downloaded (safetensors only)."""
    snapshot = cached_snapshot(model_id)
    if snapshot is not None:
        return snapshot
    if hub_offline():
        raise not_cached(model_id, "the hub is switched off here (HF_HUB_OFFLINE=1)")
    endpoint = hub_endpoint()
    if not hub_reachable(endpoint):
        raise not_cached(model_id, f"{endpoint} cannot be reached (no network?)")
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    repo, cache = repo_candidates(model_id)[0], hub_cache_dir()

    def get(filename: str) -> Path:
        bar = _progress_bar_class(progress, cancel, f"downloading {filename}")
        return Path(hf_hub_download(repo, filename, cache_dir=cache, endpoint=endpoint, tqdm_class=bar))

    try:
        folder = get("config.json").parent
        try:
            get("model.safetensors")
        except EntryNotFoundError:
            try:
                index = get("model.safetensors.index.json")
            except EntryNotFoundError:
                raise LoadError(
                    f"{repo} has no safetensors weights on the hub; only safetensors are downloaded (pickled "
                    f"weights can run code). If you trust it, download it yourself and point at the folder"
                ) from None
            for shard in sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())):
                get(shard)
        if repo not in HUB_REPOS.values():
            _get_optional(get, TOKENIZER_FILES, EntryNotFoundError)
    except LoadError:
        raise
    except GatedRepoError:
        raise LoadError(f"{repo} is gated on the hub: accept its terms and log in (`hf auth login`), "
                        f"or download it yourself and point at the folder") from None
    except RepositoryNotFoundError:
        raise LoadError(f"no model {repo!r} on the hub; check the spelling (known: {', '.join(HUB_IDS)}) "
                        f"or give a local folder/file") from None
    except (LocalEntryNotFoundError, ConnectionError) as exc:
        raise not_cached(model_id, f"the hub cannot be reached ({exc.__class__.__name__})") from None
    except OSError as exc:  # HTTP errors, disk full, permissions
        raise LoadError(f"downloading {repo} failed: {exc}; check the network and free disk space in {cache}") from None
    return folder


def _get_optional(get, filenames, not_found) -> None:
    """Download what the repository has of `filenames`; a missing one is no error (a model may
    come without a tokenizer: loading then says so)."""
    for filename in filenames:
        try:
            get(filename)
        except not_found:
            pass


def _progress_bar_class(progress: ProgressFn | None, cancel: Callable[[], bool] | None, what: str):
    """A tqdm class for huggingface_hub's downloads that reports bytes to `progress`, checks
    `cancel` on every chunk and prints nothing. (A vanilla tqdm subclass is built with exactly
    the arguments huggingface_hub gives it; it injects nothing.)"""
    from tqdm.std import tqdm

    class ProgressBridge(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)
            self.done = int(kwargs.get("initial") or 0)

        def update(self, n=1):
            if cancel is not None and cancel():
                raise LoadCancelled(f"{what} cancelled; the partial download is resumed next time")
            self.done += int(n or 0)
            if progress is not None:
                progress(self.done, int(self.total or 0), what)

    return ProgressBridge
