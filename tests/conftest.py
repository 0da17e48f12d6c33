"""The `slow` marker: what the everyday loop (`pytest -m "not slow"`) leaves to the full run.

Why a list in one place rather than decorators spread over the files: which tests are slow is
a measurement of the whole suite (per-test times on 2 cores, issue 20), not a property each
author decides; it is kept here with the rule that produced it, and a test that is renamed or
removed makes the list fail loudly instead of silently running slow again.

The rule: a test is slow when it starts the app or a training in another process (a cold
Python importing torch and Qt: 8–30 s each), or took 3 s or more in the measured full run.
The full run (`pytest`, no -m) still runs every test; CI runs the full run.
"""
from __future__ import annotations

import faulthandler
import importlib.util
import os
import sys
from pathlib import Path

import pytest

# The suite always runs as a machine with a GPU would, where "auto" is not the CPU
# (tests/fake_accelerator/sitecustomize.py says how): a test that lets a library call pick the device
# while its oracle stays on the CPU fails on every machine, as it would on CUDA (issue 37: 59 tests did
# there, none here). So CI on a CPU keeps the suite device-honest in its one run. Tests of the real rule
# take the `real_auto_device` fixture. GPT_EXPLORER_TEST_FAKE_ACCELERATOR=0 turns the switch off.
# Installed before any test module imports gptcore, and inherited by every Python process a test starts.
FAKE_ACCELERATOR_DIR = Path(__file__).resolve().parent / "fake_accelerator"


def _install_fake_accelerator() -> None:
    os.environ.setdefault("GPT_EXPLORER_TEST_FAKE_ACCELERATOR", "1")
    spec = importlib.util.spec_from_file_location("_fake_accelerator", FAKE_ACCELERATOR_DIR / "sitecustomize.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    if fake.enabled():
        fake.install()
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(FAKE_ACCELERATOR_DIR), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


_install_fake_accelerator()

# Without Qt (a GPU machine's image lacks PySide6, pyqtgraph and pytest-qt, issue 37) the headless
# half of the suite still runs: a test module whose import stops at a missing Qt package is skipped
# as a whole, and a test that asks for a Qt fixture (qtbot, qapp, or one built on them) is skipped,
# each with the missing package named. Where those packages are installed nothing is skipped, and
# any other import error stays an error.
QT_PACKAGES = ("PySide6", "shiboken6", "pyqtgraph", "pytestqt")  # pytestqt: pytest-qt (qtbot, qapp)
QT_MISSING = tuple(name for name in QT_PACKAGES if importlib.util.find_spec(name) is None)
QT_FIXTURES = {"qtbot", "qapp", "run_screenshot"}  # run_screenshot starts the app, which needs PySide6
# Test-only packages a GPU image lacks too (its pytest is bare): a module that imports one is skipped the same
# way, so `pytest -m cuda` collects there. The test extras install them, so CI runs these modules.
TEST_ONLY_MISSING = tuple(name for name in ("hypothesis",) if importlib.util.find_spec(name) is None)
OPTIONAL_MISSING = QT_MISSING + TEST_ONLY_MISSING


def pytest_addoption(parser) -> None:
    if "pytestqt" in QT_MISSING:  # pyproject's qt_api is pytest-qt's setting: known, unused, not warned about
        parser.addini("qt_api", "pytest-qt's Qt binding (pytest-qt is not installed here)")


def _qt_reason(what: str) -> str:
    return (f"{what}; not installed here: {', '.join(OPTIONAL_MISSING)} "
            f"(pip install -e '.[test]' brings them; the headless tests run without)")


class _OptionalPackagesModule(pytest.Module):
    """A test module that is skipped, not errored, when its import stops at a missing Qt or test-only package."""

    def _getobj(self):
        try:
            return super()._getobj()
        except self.CollectError as exc:
            cause = exc.__cause__
            missing = getattr(cause, "name", None) or ""
            if isinstance(cause, ModuleNotFoundError) and missing.split(".")[0] in OPTIONAL_MISSING:
                pytest.skip(_qt_reason(f"{self.path.name} imports {missing}"), allow_module_level=True)
            raise


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):
    if OPTIONAL_MISSING and module_path.name.startswith("test_"):
        return _OptionalPackagesModule.from_parent(parent, path=module_path)
    return None


def _skip_qt_tests(items) -> None:
    for item in items:
        wanted = QT_FIXTURES & set(getattr(item, "fixturenames", ()))
        if wanted:
            item.add_marker(pytest.mark.skip(reason=_qt_reason(f"uses the {', '.join(sorted(wanted))} fixture")))
        elif item.get_closest_marker("qt") is not None:
            item.add_marker(pytest.mark.skip(reason=_qt_reason("marked qt")))


# A hung test ends the run within this many seconds, with every thread's stack printed, instead of
# holding CI until its 90-minute limit (a deadlock between Qt's signal lock and the GIL did that
# once). faulthandler's watchdog is a C thread: it fires even while a deadlock holds the GIL, where
# a Python timer could not. The slowest test (a training in another process) takes about a minute.
HANG_LIMIT_S = float(os.environ.get("GPT_EXPLORER_TEST_HANG_LIMIT_S", "900"))


def _real_stderr(config) -> int:
    """The terminal's stderr: pytest captures fd 2 into a file around each test, which a hard exit
    would never print. Its capture manager keeps the original descriptor (not public API: fall back)."""
    capturing = getattr(config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
    saved = getattr(getattr(capturing, "err", None), "targetfd_save", None)
    return saved if isinstance(saved, int) else sys.__stderr__.fileno()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(HANG_LIMIT_S, exit=True, file=_real_stderr(item.config))
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()

@pytest.fixture
def real_auto_device(monkeypatch):
    """For a test of the "auto" rule itself: gptcore's default_device() as the library defines it,
    also under GPT_EXPLORER_TEST_FAKE_ACCELERATOR (which otherwise makes "auto" the meta device)."""
    from gptcore.io import loading

    real = getattr(loading.default_device, "__wrapped__", loading.default_device)
    monkeypatch.setattr(loading, "default_device", real)
    return real


@pytest.fixture(autouse=True)
def _same_random_draws_every_run():
    """Every test starts from the same seeds (torch, numpy, Python's random), whatever ran before it.
    Why: a test's random weights or bytes can land on a boundary once in N runs (CI once drew a
    damaged file opening with a pickle's first byte); seeded, a test passes or fails every time."""
    import random

    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


SLOW_FIXTURES = {"run_screenshot"}  # the app as a subprocess (`python -m explorer --screenshot …`)

# module -> test functions (every parametrisation) measured at >= 3 s, or starting a process
SLOW = {
    "tests/test_without_qt.py": {"test_pytest_m_cuda_collects_without_qt_and_says_what_it_skipped",
                                 "test_the_headless_session_tests_pass_without_qt"},
    "tests/explorer/test_attention_panel.py": {
        "test_fault_model_swap_mid_computation_draws_nothing_stale", "test_fault_prompt_edge_cases",
        "test_fault_rapid_typing"},
    "tests/explorer/test_attention_redraw.py": {"test_redraw_after_edits_equals_a_fresh_panel"},
    "tests/explorer/test_attention_typing.py": {"test_twenty_keys_a_second_end_on_the_last_text_without_a_backlog"},
    "tests/explorer/test_attribution_panel.py": {"test_cancel_stops_patching_cleanly"},
    "tests/explorer/test_attribution_window.py": {
        "test_ablation_shows_in_the_status_bar_and_reset_restores_every_panel"},
    "tests/explorer/test_bench_past_block.py": {"test_the_bench_types_past_block_size_with_slack_and_without"},
    "tests/explorer/test_compute_thread.py": {"test_generation_does_not_hold_a_keystroke_for_more_than_one_step"},
    "tests/explorer/test_config_panel.py": {"test_build_names_the_preset_when_the_config_equals_one"},
    "tests/explorer/test_fault_long_session.py": {"test_fault_long_session_leaks_nothing"},
    "tests/explorer/test_fault_suite.py": {
        "test_fault_bad_checkpoint_opened_in_the_window_loses_nothing",
        "test_fault_closing_during_generation_or_residual_sweep_exits_cleanly",
        "test_fault_cuda_oom_during_generation", "test_fault_cuda_oom_in_the_attention_forward",
        "test_fault_device_cuda_without_a_gpu"},
    "tests/explorer/test_fault_truth.py": {
        "test_fault_bad_model_at_start_opens_the_default_and_does_not_claim_a_previous_model",
        "test_fault_bad_model_in_screenshot_mode_still_exits_2_with_the_message"},
    "tests/explorer/test_head_count_window.py": {"test_screenshot_mode_needs_n_head_and_uses_it"},
    "tests/explorer/test_shell_app.py": {
        "test_fault_closing_during_work_exits_cleanly", "test_screenshot_mode_fails_cleanly_for_a_missing_model",
        "test_screenshot_mode_writes_the_config_panel_png"},
    "tests/explorer/test_shell_window.py": {"test_every_registered_panel_opens_from_its_tab"},
    "tests/explorer/test_small_windows.py": {"test_every_panel_fits_a_900_by_600_window",
                                             "test_grid_labels_thin_out_to_what_fits"},
    "tests/explorer/test_train_labels.py": {
        "test_a_run_opened_scrubbed_and_a_second_run_started_are_named_alike_by_banner_badge_and_status"},
    "tests/explorer/test_train_panel.py": {
        "test_a_run_started_in_the_panel_is_followed_scrubbed_into_every_panel_and_stopped",
        "test_a_run_the_training_refuses_shows_its_reason_in_the_panel",
        "test_pause_resume_and_quitting_while_paused_leaves_no_child_process"},
    "tests/gptcore/test_loading.py": {"test_gpt2_small_shape_round_trip"},
    "tests/gptcore/test_nanogpt_interop.py": {"test_a_run_on_a_nanogpt_data_folder_is_sampled_by_sample_py"},
    "tests/gptcore/test_probes_incremental.py": {
        "test_typing_past_block_size_with_slack_reuses_the_window_and_equals_a_full_recompute"},
    "tests/gptcore/test_circuits_bench.py": {"test_the_circuits_bench_quick_json_has_the_promised_keys"},
    "tests/gptcore/test_circuits_transcoder.py": {"test_a_transcoder_recovers_a_known_sparse_map"},
    "tests/gptcore/test_sae_bench.py": {"test_the_sae_bench_quick_json_has_the_promised_keys"},
    "tests/gptcore/test_train_cli.py": {
        "test_ctrl_c_in_a_real_process_leaves_a_loadable_checkpoint_while_a_reader_follows",
        "test_the_induction_preset_brings_its_model_settings_and_data_and_resumes_with_them"},
    "tests/gptcore/test_train_ddp.py": {"test_an_accumulation_the_processes_cannot_share_is_refused_by_every_process",
                                        "test_two_gloo_processes_train_the_same_weights_as_one"},
    "tests/gptcore/test_training_compile.py": {
        "test_compiled_steps_equal_eager_ones_and_a_probe_between_them_recompiles_nothing",  # inductor: 10-100 s
        "test_a_failed_compile_falls_back_to_eager_with_one_message_and_the_eager_numbers"},
    "tests/gptcore/test_training_cuda.py": {"test_compiled_cuda_steps_follow_eager_ones"},  # inductor on a GPU
    "tests/gptcore/test_training_ddp.py": {"test_two_processes_train_like_one"},
}


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: left out of the everyday loop (`pytest -m \"not slow\"`); "
                                       "see tests/conftest.py for the rule")
    config.addinivalue_line("markers", "qt: needs Qt (PySide6, pyqtgraph, pytest-qt) beyond what the module "
                                       "imports; skipped, with the reason, where they are not installed")


def pytest_collection_modifyitems(config, items) -> None:
    if QT_MISSING:
        _skip_qt_tests(items)
    defined: dict[str, set[str]] = {}  # module -> the test functions it defines (whatever was selected)
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
        if module not in defined and getattr(item, "module", None) is not None:
            defined[module] = {n for n in vars(item.module) if n.startswith("test")}
        if name in SLOW.get(module, ()) or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    stale = [f"{module}::{name}" for module, names in SLOW.items() if module in defined
             for name in sorted(names - defined[module])]
    if stale:
        raise pytest.UsageError("tests/conftest.py lists slow tests that no longer exist (renamed or removed?): "
                                + ", ".join(stale) + " — update SLOW")
