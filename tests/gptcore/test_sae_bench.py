"""`python -m gptcore.bench --sae --quick --json` runs end to end and reports every figure it
promises (issue 33). No timing is asserted: timings on a shared machine prove nothing."""
import contextlib
import io
import json

import pytest
import torch

from gptcore import bench

KEYS = ("sae_tokens_s", "sae_peak_mb", "char_sae_s", "char_sae_peak_mb", "char_l0", "char_explained_variance",
        "char_ce_loss_recovered", "char_dead_fraction", "char_dead_fraction_sample", "cache_mb", "cache_peak_mb",
        "cache_fit_tokens_s")


def test_the_sae_bench_quick_json_has_the_promised_keys(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # the bench sets it by default; keep it from leaking
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.main(["--sae", "--quick", "--json"]) == 0
    result = json.loads(out.getvalue())
    for key in KEYS:
        assert isinstance(result[key], (int, float)) and result[key] >= 0, key
    assert result["quick"] is True and result["char_l0"] <= 16 and result["cache_mb"] > 0
    assert result["sae_device"] == "cpu" and result["char_sample_tokens"] == 8192
    assert 0 < result["char_explained_variance"] <= 1 and result["char_ce_clean"] < result["char_ce_zero"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_the_sae_bench_on_a_missing_gpu_says_so_and_stops(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # as above: keep the bench's setting from leaking
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.main(["--sae", "--device", "cuda"]) == 2
    assert "CUDA was requested but is not available" in out.getvalue() and "Traceback" not in out.getvalue()
