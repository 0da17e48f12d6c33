"""The GPU check runs where Qt is not installed (issue 37): a GPU server's image has torch, transformers
and pytest but not PySide6, pyqtgraph, pytest-qt or hypothesis. There `pytest -m cuda` must collect
(test modules needing those packages skip themselves, naming the package) and the headless session
tests must pass.

A child pytest sees those packages as missing: `sys.modules[name] = None` makes `import name` raise
ModuleNotFoundError naming it and `importlib.util.find_spec(name)` return None, which is what a machine
without them gives. Plugins are not auto-loaded in the child (pytest-qt is one)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ("PySide6", "shiboken6", "pyqtgraph", "pytestqt", "hypothesis")
CHILD = ("import sys\n"
         f"for name in {HIDDEN!r}:\n"
         "    sys.modules[name] = None\n"
         "import pytest\n"
         "sys.exit(pytest.main(sys.argv[1:]))\n")


def _pytest_without_qt(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("QT_QPA_PLATFORM", None)
    return subprocess.run([sys.executable, "-c", CHILD, "-q", "-rs", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def test_pytest_m_cuda_collects_without_qt_and_says_what_it_skipped():
    done = _pytest_without_qt("-m", "cuda", "--collect-only")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "error" not in done.stdout.splitlines()[-1].lower()
    assert "test_attention_panel.py imports PySide6" in done.stdout and "not installed here: PySide6" in done.stdout
    assert "test_params.py imports hypothesis" in done.stdout


def test_the_headless_session_tests_pass_without_qt():
    done = _pytest_without_qt("tests/explorer/test_session_devices.py", "tests/explorer/test_session_circuits.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last and "error" not in last, last
