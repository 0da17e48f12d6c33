"""Before the QApplication: can Qt's X11 platform plugin (xcb) load on this Linux desktop?

Why: pip brings Qt but not the X11 libraries its xcb plugin links against. Several of them
(`libxcb-cursor0`, `libxcb-icccm4`, `libxcb-keysyms1`) are missing on a fresh Debian 12 desktop,
and Qt then aborts with "Could not load the Qt platform plugin "xcb"", which names neither the
libraries nor a fix. We try to load each library first and, if any is missing, say which and how
to install it, and exit with 2.

Only when xcb is what Qt will pick: Linux, `DISPLAY` set, and `QT_QPA_PLATFORM` unset or naming
xcb first. Qt 6 prefers Wayland when `WAYLAND_DISPLAY` is set or `XDG_SESSION_TYPE=wayland`, so
then (and for offscreen, wayland, …) nothing is checked. No Qt import: the check must run before
Qt aborts the process. `GPT_EXPLORER_NO_PLATFORM_CHECK=1` skips it (a system whose loader finds
the libraries by other means than ours).
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path
from typing import Callable, Mapping

SKIP_SWITCH = "GPT_EXPLORER_NO_PLATFORM_CHECK"

# Every system library PySide6/Qt/plugins/platforms/libqxcb.so names (objdump -p: NEEDED),
# less Qt's own and the C/C++ runtime: soname -> (Debian/Ubuntu package, Fedora package).
XCB_PLUGIN_LIBRARIES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
}


def xcb_is_next(environ: Mapping[str, str], platform: str = sys.platform) -> bool:
    """True when the QApplication about to be created will use the xcb plugin (Qt 6's rule)."""
    if not platform.startswith("linux") or not environ.get("DISPLAY"):
        return False
    chosen = environ.get("QT_QPA_PLATFORM", "").strip()
    if chosen:  # "xcb", "xcb:arguments", or a fallback list "wayland;xcb": the first one is tried first
        return chosen.split(";")[0].split(":")[0].strip().lower() == "xcb"
    return not (environ.get("WAYLAND_DISPLAY") or environ.get("XDG_SESSION_TYPE", "").lower() == "wayland")


def _load_library(soname: str) -> None:
    """Raises OSError when the dynamic loader cannot load `soname` (what Qt will ask of it)."""
    ctypes.CDLL(soname)


def _qt_lib_dir() -> Path | None:
    """PySide6's own Qt/lib, found without importing PySide6 (a wheel may bring a library there)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "Qt" / "lib"


def missing_xcb_libraries(load: Callable[[str], None] | None = None) -> list[str]:
    """The sonames of XCB_PLUGIN_LIBRARIES that neither PySide6's Qt/lib holds nor the loader finds."""
    load = load or _load_library
    bundled = _qt_lib_dir()
    missing = []
    for soname in XCB_PLUGIN_LIBRARIES:
        if bundled is not None and (bundled / soname).exists():
            continue
        try:
            load(soname)
        except OSError:
            missing.append(soname)
    return missing


def install_message(missing: list[str]) -> str:
    """One message: what is missing, that pip cannot help, the command for Debian/Ubuntu and Fedora."""
    debian = list(dict.fromkeys(XCB_PLUGIN_LIBRARIES[s][0] for s in missing))
    fedora = list(dict.fromkeys(XCB_PLUGIN_LIBRARIES[s][1] for s in missing))
    return (
        f"gpt-explorer: cannot open a window on this X11 display: Qt's xcb platform plugin needs system "
        f"libraries that are not installed: {', '.join(missing)}.\n"
        "pip cannot install them; install them with your system's package manager, then start again:\n"
        f"  Debian/Ubuntu:  sudo apt install {' '.join(debian)}\n"
        f"  Fedora:         sudo dnf install {' '.join(fedora)}"
    )


def xcb_problem(environ: Mapping[str, str] | None = None, platform: str = sys.platform,
                load: Callable[[str], None] | None = None) -> str | None:
    """The message to exit with when xcb is next and cannot load; None when all is well or
    another platform (wayland, offscreen, …) will be used."""
    environ = os.environ if environ is None else environ
    if environ.get(SKIP_SWITCH, "").strip() not in ("", "0") or not xcb_is_next(environ, platform):
        return None
    missing = missing_xcb_libraries(load)
    return install_message(missing) if missing else None
