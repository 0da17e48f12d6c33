"""Shared fixtures for the explorer's pytest-qt tests.

`qapp`/`qtbot` come from pytest-qt (offscreen). The autouse `no_leaks` fixture fails any
test that leaves background work running, an active QTimer owned by one of our objects,
or a visible top-level window: those are exactly the things that make a desktop app hang
on quit or slowly eat memory, and they are invisible unless a test looks.

This file imports no Qt at module level: without Qt (a GPU machine's image) the headless tests
here still run, and the rest are skipped with the reason (tests/conftest.py's Qt guard).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("GPT_EXPLORER_STRICT_TASKS", "1")  # a task holding a Qt object raises (runtime/task_check.py)

import pytest  # noqa: E402

from explorer.session.core import Session  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _private_user_dirs(tmp_path_factory, monkeypatch):
    """Settings, logs and caches of the app go to a temporary home, never the user's."""
    home = tmp_path_factory.mktemp("home")
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"),
                     ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no test may reach the network
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    yield home


@pytest.fixture
def tiny_session() -> Session:
    """A 2-layer, 4-head, 64-wide random model with GPT-2's vocabulary, on the CPU."""
    return Session.tiny()


@pytest.fixture
def runner(qapp):
    from explorer.runtime.workers import TaskRunner

    r = TaskRunner()
    yield r
    finished = r.wait_all(5000)
    qapp.processEvents()  # deliver what the last tasks queued, while the runner still exists
    r.deleteLater()
    assert finished, "a background task ignored its cancel token for 5 s"


@pytest.fixture
def panel_context(tiny_session, runner):
    """What a panel factory receives, without a main window (ctx.window is None)."""
    from explorer.controllers.context import PanelContext

    return PanelContext(session=tiny_session, runner=runner, window=None, prompt=None)


@pytest.fixture
def window(qtbot, tiny_session, runner, tmp_path):
    """The main window on the tiny session, shown, with settings in a temporary file."""
    from PySide6.QtCore import QSettings

    from explorer.shell.window import MainWindow

    w = MainWindow(tiny_session, runner, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def single_torch_thread():
    """One intra-op thread: on this shared 2-core machine, two OpenMP threads spinning over a
    64-wide model make each capture ~50× slower; the behaviour under test is the same."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def corpus(tmp_path, monkeypatch) -> str:
    """The features tests' corpus: a short English text in a file (its path returned), with this test's
    data folder as XDG_DATA_HOME, where what is trained on it is saved."""
    from tests.explorer.test_session_features import TEXT

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


@pytest.fixture
def hf_checkpoint(tmp_path):
    """Writes a tiny GPT-2 with transformers' own class (GPT-2 vocabulary, 2 layers, 4 heads,
    32 wide, 64 positions unless overridden) and returns its folder."""
    def write(**config) -> Path:
        transformers = pytest.importorskip("transformers")
        values = dict(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=4)
        values.update(config)
        folder = tmp_path / "tiny-gpt2"
        transformers.GPT2LMHeadModel(transformers.GPT2Config(**values)).save_pretrained(folder)
        return folder

    return write


@pytest.fixture
def run_screenshot():
    """Runs the real entry point, `python -m explorer --screenshot OUT --panel P --size WxH ARGS…`,
    offscreen and offline from the checkout; extra keywords are environment variables. On the CPU
    unless ARGS name a --device: "auto" would be the GPU where there is one (issue 37)."""
    def run(out, panel: str, size: str, *args: str, timeout: int = 240, **env) -> subprocess.CompletedProcess:
        device = () if "--device" in args else ("--device", "cpu")
        return subprocess.run(
            [sys.executable, "-m", "explorer", "--screenshot", str(out), "--panel", panel, "--size", size, *args,
             *device],
            capture_output=True, text=True, timeout=timeout, cwd=ROOT,
            env=dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", **env))

    return run


def _leaks(qapp) -> list[str]:
    from PySide6.QtCore import QCoreApplication, QEvent, QThreadPool, QTimer
    from PySide6.QtWidgets import QApplication

    from explorer.runtime.workers import live_runners

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    found = []
    for r in live_runners():
        if r.busy or r.active_count():
            found.append(f"TaskRunner still running {r.active_count()} task(s)")
    if QThreadPool.globalInstance().activeThreadCount():
        found.append("work left running in the global QThreadPool")
    for w in QApplication.topLevelWidgets():
        if w.isVisible():
            found.append(f"visible top-level widget {type(w).__name__} {w.windowTitle()!r}")
    for w in QApplication.allWidgets():
        if not type(w).__module__.startswith("explorer"):
            continue
        for t in w.findChildren(QTimer):
            if t.isActive():
                owner = t.parent()
                found.append(f"active QTimer ({t.interval()} ms) owned by {type(owner).__name__}")
    return found


def _clean_up(qapp) -> None:
    from PySide6.QtWidgets import QApplication

    from explorer.runtime.workers import live_runners

    for r in live_runners():
        r.wait_all(5000)
    for w in QApplication.topLevelWidgets():
        if w.isVisible():
            w.close()
        w.deleteLater()
    qapp.processEvents()


@pytest.fixture(autouse=True)
def collect_on_the_gui_thread(request, no_leaks):
    """As the app does (runtime/gui_gc.py): a test's cyclic garbage is never collected on the
    compute thread, where freeing a Qt object can deadlock. Stopped before `no_leaks` looks."""
    if "qapp" not in request.fixturenames and "qtbot" not in request.fixturenames:
        yield  # no Qt objects, and no compute thread (the runner needs a QApplication)
        return
    from explorer.runtime.gui_gc import GuiThreadCollector

    collector = GuiThreadCollector(request.getfixturevalue("qapp"))
    yield
    collector.stop()
    collector.deleteLater()


@pytest.fixture(autouse=True)
def no_leaks(request):
    """Fail a test that leaves threads, timers or windows behind (after pytest-qt closed its widgets)."""
    yield
    if "qapp" not in request.fixturenames and "qtbot" not in request.fixturenames:
        return  # a test that never touched Qt cannot leak Qt objects
    qapp = request.getfixturevalue("qapp")
    found = _leaks(qapp)
    if found:
        _clean_up(qapp)  # so one leak does not fail every later test too
        pytest.fail("test leaked: " + "; ".join(sorted(set(found))), pytrace=False)
