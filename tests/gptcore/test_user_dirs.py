"""The user's folders without platformdirs (a GPU image lacks it, issue 37) are the ones platformdirs
names on Linux, so a cache or a runs folder does not move when the package is missing."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gptcore.io.user_dirs import user_dir, xdg_dir

KINDS = ("cache", "data", "log")


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    for var in ("XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    return tmp_path


def test_without_platformdirs_the_xdg_folders_are_used(xdg, monkeypatch):
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # `import platformdirs` now fails
    assert user_dir("cache", "gptcore") == xdg / "xdg_cache_home" / "gptcore"
    assert user_dir("data", "gpt-explorer") == xdg / "xdg_data_home" / "gpt-explorer"
    assert user_dir("log", "gpt-explorer") == xdg / "xdg_state_home" / "gpt-explorer" / "log"


def test_an_unset_or_relative_variable_means_the_default_under_home(monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert xdg_dir("cache", "app") == Path.home() / ".cache" / "app"
    assert xdg_dir("data", "app") == Path.home() / ".local" / "share" / "app"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platformdirs follows XDG on Linux only")
@pytest.mark.parametrize("kind", KINDS)
def test_on_linux_the_fallback_names_platformdirs_own_folder(xdg, kind):
    pytest.importorskip("platformdirs")
    assert xdg_dir(kind, "gpt-explorer") == user_dir(kind, "gpt-explorer")


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="cache, data, log"):
        user_dir("config", "app")
