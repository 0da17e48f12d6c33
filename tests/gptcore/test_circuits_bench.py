"""`python -m gptcore.bench --circuits --quick --json` runs end to end and reports every figure it
promises (issue 38). No timing is asserted: timings on a shared machine prove nothing."""
import contextlib
import io
import json

import pytest
import torch

from gptcore import bench

KEYS = ("graph_s", "graph_nodes", "graph_peak_mb", "graph_adjacency_mb", "graph_autograd_s", "step_ms",
        "step_autograd_ms", "char_tc_s", "char_tc_peak_mb", "char_ce_clean", "char_ce_replaced", "char_ce_zero",
        "char_graph_s", "char_graph_nodes", "char_graph_kept_nodes")


def test_the_circuits_bench_quick_json_has_the_promised_keys(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # the bench sets it by default; keep it from leaking
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.main(["--circuits", "--quick", "--json"]) == 0
    result = json.loads(out.getvalue())
    for key in KEYS:
        assert isinstance(result[key], (int, float)) and result[key] >= 0, key
    assert result["quick"] is True and len(result["char_fvu"]) == 2 and all(0 <= f for f in result["char_fvu"])
    assert result["graph_autograd_rel_diff"] < 1e-4  # the autograd reference's rows equal the graph's
    assert result["char_ce_clean"] > 0 and result["char_ce_zero"] > 0  # (a 3-second model may not use its MLPs yet)
    assert 0 < result["char_graph_kept_nodes"] <= result["char_graph_nodes"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_the_circuits_bench_on_a_missing_gpu_says_so_and_stops(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # as above: keep the bench's setting from leaking
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.main(["--circuits", "--device", "cuda"]) == 2
    assert "CUDA was requested but is not available" in out.getvalue() and "Traceback" not in out.getvalue()
