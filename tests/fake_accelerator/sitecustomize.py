"""`GPT_EXPLORER_TEST_FAKE_ACCELERATOR=1`: the suite run as if the machine had an accelerator.

Why: on a machine with CUDA, "auto" (gptcore.io.loading.default_device) picks the GPU, and a test
that lets a library call choose the device while its oracle stays on the CPU fails there (issue 37:
59 of the first 455 gptcore tests did, on an H200), yet passes on every CPU-only machine the suite
normally runs on. Under this switch "auto" resolves to the `meta` device instead: a stand-in for
"not the CPU" on which every tensor is a shape without data, so whatever silently lands there fails
loudly the moment a number is read (`.item()`, `.numpy()`, a comparison with a CPU tensor). A test
that names its device, or a library that honours the device it is given, is untouched.

This file is a `sitecustomize` module: tests/conftest.py imports it into the test process and puts
its folder first on PYTHONPATH, so every Python process a test starts (`python -m gptcore ...`)
imports it at start-up and runs under the same rule. It imports nothing heavy at start-up: the
patch is applied when `gptcore.io.loading` itself is first imported (a finder on sys.meta_path).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

SWITCH = "GPT_EXPLORER_TEST_FAKE_ACCELERATOR"
TARGET = "gptcore.io.loading"
STAND_IN = "meta"  # the device "auto" becomes under the switch


def enabled() -> bool:
    return os.environ.get(SWITCH, "") not in ("", "0")


def patch(loading) -> None:
    """`default_device()` (and through it `resolve_device(None | "auto")`) -> the stand-in."""
    import torch

    if getattr(loading.default_device, "fake_accelerator", False):
        return  # already patched (this file imported twice: by conftest and as sitecustomize)

    def fake_default_device() -> torch.device:
        return torch.device(STAND_IN)

    fake_default_device.__doc__ = f"{SWITCH}: 'auto' is the {STAND_IN} device (tests/fake_accelerator)"
    fake_default_device.__wrapped__ = loading.default_device  # the real rule (the `real_auto_device` fixture)
    fake_default_device.fake_accelerator = True
    loading.default_device = fake_default_device


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds gptcore.io.loading as usual, and patches it as soon as its code has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)  # find the real module, once
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_and_patch(module):
            run_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    """Patch now if gptcore.io.loading is already imported, else when it is."""
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


if enabled():
    install()
