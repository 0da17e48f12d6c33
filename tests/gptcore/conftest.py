"""gptcore's tests keep their caches (the autocast timings of training.autocast_choice, written
through platformdirs) in a temporary folder, never the user's; child processes inherit it. And
`one_torch_thread`, for tests of tiny problems."""
from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture
def one_torch_thread():
    """Small problems: a second OpenMP thread only spin-waits on a shared machine. Restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
