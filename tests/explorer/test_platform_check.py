"""The start-up check for Qt's xcb plugin: our message and exit code 2 instead of Qt's abort
when the X11 libraries pip cannot bring are missing; nothing checked for wayland or offscreen.

The entry point runs in a subprocess: were the check to miss, Qt would take the process down
(or open a window), which a test must see from outside."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import explorer.shell.platform_check as platform_check
from explorer.shell.platform_check import XCB_PLUGIN_LIBRARIES, xcb_is_next, xcb_problem

ROOT = Path(__file__).resolve().parents[2]
TRIO = ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
DEBIAN = "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1"
FEDORA = "sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms"
X11 = {"DISPLAY": ":99"}


class Loader:
    """Stands in for the dynamic loader: `missing` raise OSError as ctypes.CDLL does."""

    def __init__(self, missing=()):
        self.missing, self.asked = set(missing), []

    def __call__(self, soname):
        self.asked.append(soname)
        if soname in self.missing:
            raise OSError(f"{soname}: cannot open shared object file: No such file or directory")


@pytest.mark.parametrize("env,platform,expected", [
    (X11, "linux", True),
    ({**X11, "QT_QPA_PLATFORM": "xcb"}, "linux", True),
    ({**X11, "QT_QPA_PLATFORM": "xcb:nograb"}, "linux", True),
    ({**X11, "QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "wayland-0"}, "linux", True),  # explicit wins
    ({**X11, "XDG_SESSION_TYPE": "x11"}, "linux", True),
    ({**X11, "QT_QPA_PLATFORM": "offscreen"}, "linux", False),
    ({**X11, "QT_QPA_PLATFORM": "wayland"}, "linux", False),
    ({**X11, "QT_QPA_PLATFORM": "wayland;xcb"}, "linux", False),
    ({**X11, "WAYLAND_DISPLAY": "wayland-0"}, "linux", False),  # Qt 6 tries wayland first
    ({**X11, "XDG_SESSION_TYPE": "wayland"}, "linux", False),
    ({}, "linux", False),  # no X display: nothing to check
    ({"QT_QPA_PLATFORM": "xcb"}, "linux", False),
    (X11, "darwin", False),
    (X11, "win32", False),
], ids=lambda v: repr(v) if not isinstance(v, bool) else str(v))
def test_xcb_is_next_follows_qts_choice(env, platform, expected):
    assert xcb_is_next(env, platform) is expected


def test_missing_libraries_are_named_with_both_install_commands(monkeypatch):
    monkeypatch.setattr(platform_check, "_qt_lib_dir", lambda: None)
    message = xcb_problem(X11, "linux", load=Loader(TRIO))
    assert message.startswith("gpt-explorer: ")
    assert ", ".join(TRIO) in message
    assert DEBIAN in message.splitlines()[2] and FEDORA in message.splitlines()[3]

    one = xcb_problem(X11, "linux", load=Loader(["libxcb-icccm.so.4"]))
    assert "libxcb-icccm.so.4" in one and "libxcb-cursor.so.0" not in one
    assert "sudo apt install libxcb-icccm4\n" in one and one.endswith("sudo dnf install xcb-util-wm")
    assert xcb_problem(X11, "linux", load=Loader()) is None


def test_every_listed_library_is_checked_and_each_has_both_package_names(monkeypatch):
    monkeypatch.setattr(platform_check, "_qt_lib_dir", lambda: None)
    loader = Loader()
    assert xcb_problem(X11, "linux", load=loader) is None
    assert loader.asked == list(XCB_PLUGIN_LIBRARIES)
    assert set(TRIO) <= set(XCB_PLUGIN_LIBRARIES)
    assert all(deb and fedora for deb, fedora in XCB_PLUGIN_LIBRARIES.values())


def test_a_library_that_pyside6_bundles_is_not_reported(monkeypatch, tmp_path):
    (tmp_path / "libxcb-cursor.so.0").write_bytes(b"")
    monkeypatch.setattr(platform_check, "_qt_lib_dir", lambda: tmp_path)
    message = xcb_problem(X11, "linux", load=Loader(TRIO))
    assert "libxcb-cursor.so.0" not in message and "libxcb-icccm.so.4, libxcb-keysyms.so.1." in message


@pytest.mark.parametrize("env", [
    {**X11, "QT_QPA_PLATFORM": "offscreen"},
    {**X11, "WAYLAND_DISPLAY": "wayland-0"},
    {**X11, "QT_QPA_PLATFORM": "wayland"},
    {**X11, platform_check.SKIP_SWITCH: "1"},
])
def test_wayland_offscreen_and_the_skip_switch_never_load_anything(env):
    loader = Loader(XCB_PLUGIN_LIBRARIES)
    assert xcb_problem(env, "linux", load=loader) is None
    assert loader.asked == []


def _run_app(args, tmp_path, missing=None, **env):
    """`explorer.app.main(args)` in a fresh process on an X11-looking environment; with `missing`,
    the loader is replaced as in `Loader` (and PySide6's own lib folder ignored)."""
    patch = ""
    if missing is not None:
        patch = textwrap.dedent(f"""
            from explorer.shell import platform_check
            def load(soname, missing={sorted(missing)!r}):
                if soname in missing:
                    raise OSError(soname + ": cannot open shared object file")
            platform_check._load_library = load
            platform_check._qt_lib_dir = lambda: None
        """)
    script = patch + textwrap.dedent("""
        import sys
        from explorer.app import main
        code = main(sys.argv[1:])
        print("PySide6 imported:", "PySide6.QtWidgets" in sys.modules)
        sys.exit(code)
    """)
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE", platform_check.SKIP_SWITCH)}
    full_env.update(DISPLAY=":99", HF_HUB_OFFLINE="1", XDG_STATE_HOME=str(tmp_path / "state"),
                    XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"), **env)
    return subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
def test_the_app_exits_2_with_our_message_before_qt_starts(tmp_path):
    done = _run_app([], tmp_path, missing=TRIO)
    assert done.returncode == 2, done.stderr
    assert "PySide6 imported: False" in done.stdout  # stopped before Qt could abort on its own
    assert ", ".join(TRIO) in done.stderr and DEBIAN in done.stderr and FEDORA in done.stderr
    assert "Could not load the Qt platform plugin" not in done.stderr


@pytest.mark.qt  # the app runs to its end
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
def test_screenshot_and_offscreen_runs_are_not_checked(tmp_path):
    """--exit-after-paint goes offscreen by itself: the window paints although every xcb library
    'is missing'."""
    done = _run_app(["--exit-after-paint"], tmp_path, missing=list(XCB_PLUGIN_LIBRARIES))
    assert done.returncode == 0, done.stderr
    assert "first paint after" in done.stdout and "PySide6 imported: True" in done.stdout


def _ldd_not_found() -> list[str] | None:
    """What the dynamic linker itself says the xcb plugin lacks here (the oracle), or None."""
    qt_lib = platform_check._qt_lib_dir()
    plugin = qt_lib.parent / "plugins" / "platforms" / "libqxcb.so" if qt_lib else None
    if shutil.which("ldd") is None or plugin is None or not plugin.exists():
        return None
    out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True).stdout
    return sorted({line.split()[0] for line in out.splitlines() if "not found" in line})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb plugin is Linux's")
def test_on_this_machine_the_real_loader_agrees_with_ldd(tmp_path):
    """No simulation: `python -m explorer` with DISPLAY set. Where ldd reports libraries missing,
    the app names exactly those and exits 2; where none are, the check lets Qt go on."""
    lacking = _ldd_not_found()
    if lacking is None:
        pytest.skip("no ldd or no xcb plugin to ask")
    assert sorted(platform_check.missing_xcb_libraries()) == lacking
    if not lacking:
        pytest.skip("this machine has every library the xcb plugin needs")
    done = _run_app([], tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"not installed: {', '.join(s for s in XCB_PLUGIN_LIBRARIES if s in lacking)}." in done.stderr
