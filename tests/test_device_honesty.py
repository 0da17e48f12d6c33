"""The suite stays honest about devices (issue 37): on a machine with CUDA, 59 of the first 455
gptcore tests failed because library calls defaulting to "auto" put the model on the GPU while the
test's oracle stayed on the CPU.

Two guards keep that from coming back on machines without a GPU:
- The suite runs with "auto" resolving to the meta device (tests/fake_accelerator/sitecustomize.py; on by
  default in tests/conftest.py, `GPT_EXPLORER_TEST_FAKE_ACCELERATOR=0` turns it off), in the test process
  and in every Python process a test starts; a test that lets the device be chosen for it fails on
  every machine as it would on CUDA, so CI's one run keeps the suite honest. The first test below checks
  the switch itself works.
- "auto" is decided in one place (gptcore.io.loading.default_device), so that switch sees every
  choice: the second test fails when another module asks torch whether CUDA is there to pick a
  device by itself.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE_DIR = ROOT / "tests" / "fake_accelerator"

# module -> why it may ask torch.cuda.is_available() itself (none of them picks a device for "auto")
ALLOWED = {
    "gptcore/io/loading.py": "the rule itself (default_device) and the check of an explicit 'cuda'",
    "gptcore/training/setup.py": "the check of an explicit --device=cuda",
    "gptcore/model/cpu.py": "whether a CUDA device does bf16 in hardware (native_bf16)",
    "explorer/shell/window.py": "the About box says whether CUDA is available",
}


def test_the_fake_accelerator_makes_auto_the_meta_device_in_a_child_process():
    code = ("from gptcore import default_device, resolve_device; "
            "print(default_device(), resolve_device(None), resolve_device('auto'), resolve_device('cpu'))")
    env = {**os.environ, "GPT_EXPLORER_TEST_FAKE_ACCELERATOR": "1",
           "PYTHONPATH": os.pathsep.join([str(FAKE_DIR), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["meta", "meta", "meta", "cpu"]  # a named device is left alone


def _asks_for_cuda(path: Path) -> list[int]:
    """Lines of `path` that call `<anything>.cuda.is_available()`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "is_available"
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "cuda"):
            found.append(node.lineno)
    return found


def test_auto_is_decided_in_one_place():
    offenders = []
    for package in ("gptcore", "explorer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in ALLOWED and _asks_for_cuda(path):
                offenders.append(f"{rel}:{_asks_for_cuda(path)}")
    assert not offenders, ("these modules ask torch.cuda.is_available() themselves; pick the device with "
                           "gptcore.io.loading.default_device()/resolve_device() (one rule, which the fake "
                           "accelerator can replace), or list the module in ALLOWED with the reason: "
                           + ", ".join(offenders))
    for rel in ALLOWED:  # a stale entry would let the next offender in unnoticed
        assert _asks_for_cuda(ROOT / rel), f"{rel} no longer asks; remove it from ALLOWED"
