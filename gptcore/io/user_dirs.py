"""The user's cache, data and log folders for an app name: platformdirs' answer where it is installed,
else the same folders by the XDG rules platformdirs follows on Linux.

Why a fallback: platformdirs is a dependency of the package, but a GPU machine's image may hold only
torch and what the headless session needs (issue 37: its image lacks platformdirs); a training's
autocast timing cache, the runs folder and the SAE folder must still have a home there, and on Linux
it is the very folder platformdirs would have named.
"""
from __future__ import annotations

import os
from pathlib import Path

# kind -> (XDG variable, its default under the home folder, the sub-folder platformdirs adds)
_XDG = {
    "cache": ("XDG_CACHE_HOME", ".cache", ""),
    "data": ("XDG_DATA_HOME", ".local/share", ""),
    "log": ("XDG_STATE_HOME", ".local/state", "log"),  # platformdirs: user_state_dir / "log"
}


def user_dir(kind: str, app: str) -> Path:
    """The user's `kind` folder ("cache", "data" or "log") for `app` (not created here)."""
    if kind not in _XDG:
        raise ValueError(f"kind must be one of {', '.join(_XDG)}, got {kind!r}")
    try:
        import platformdirs
    except ModuleNotFoundError:
        return xdg_dir(kind, app)
    find = {"cache": platformdirs.user_cache_dir, "data": platformdirs.user_data_dir,
            "log": platformdirs.user_log_dir}[kind]
    return Path(find(app, appauthor=False))


def xdg_dir(kind: str, app: str) -> Path:
    """The folder by the XDG base-directory rules (an empty or relative variable is ignored, as the
    specification says)."""
    variable, default, sub = _XDG[kind]
    base = os.environ.get(variable, "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / default
    return root / app / sub if sub else root / app
