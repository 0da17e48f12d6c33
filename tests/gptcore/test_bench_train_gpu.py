"""The training bench's GPU side, checked where it can be without a GPU: the datasheet peaks by
device name, MFU as nanoGPT's estimate_mfu computes it (with the card's peak), and `--device cuda`
refused with a clear message on a machine without CUDA. (The CPU side: test_bench.py.)"""
import pytest
import torch

from gptcore import bench


def test_gpu_names_find_their_datasheet_bf16_peak():
    from gptcore.benches import flops

    assert flops.datasheet_tflops("NVIDIA H200") == 989.0
    assert flops.datasheet_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert flops.datasheet_tflops("NVIDIA H100 PCIe") == 756.0  # the PCIe card, not the SXM one
    assert flops.datasheet_tflops("NVIDIA A100-SXM4-80GB") == 312.0  # nanoGPT's estimate_mfu constant
    assert flops.datasheet_tflops("NVIDIA L40S") == 362.0 and flops.datasheet_tflops("NVIDIA L4") == 121.0
    assert flops.datasheet_tflops("NVIDIA A10G") == 70.0 and flops.datasheet_tflops("NVIDIA A10") == 125.0
    assert flops.datasheet_tflops("Tesla T4") is None  # not in the table: the bench says so


def test_the_gpu_report_is_nanogpts_estimate_mfu_with_the_cards_peak(capsys):
    """MFU as nanoGPT's estimate_mfu computes it (written out here from its model.py: flops per
    token 6·N + 12·L·H·Q·T, N every parameter but the position table, × T × sequences, ÷ dt ÷ peak),
    with the GPU's datasheet peak in place of its fixed 312 TFLOP/s."""
    from gptcore.benches.training import mfu_report
    from gptcore.benches.training_recipes import GPT2_124M
    from gptcore.model.config import GPTConfig
    from nanogpt_oracle import NanoGPTShaped

    args = {k: GPT2_124M[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")}
    reference = NanoGPTShaped(**args)
    N = sum(p.numel() for p in reference.parameters()) - reference.transformer.wpe.weight.numel()
    L, H, Q, T = 12, 12, 64, 1024
    dt = 0.0270  # the nanoGPT figure on an H200
    expected_mfu = (6 * N + 12 * L * H * Q * T) * T * 12 / dt / 989e12
    out = mfu_report(GPTConfig(**GPT2_124M), 12, {"ms_per_iter_ours": 27.0, "ms_per_iter_nanoGPT": 39.5},
                     "NVIDIA H200", 750.0, "bfloat16 matmul (a test's figure)", say=print)
    assert out["mfu_ours"] == pytest.approx(expected_mfu, rel=1e-9)
    assert out["mfu_nanoGPT"] == pytest.approx(expected_mfu * 27.0 / 39.5, rel=1e-9)
    printed = capsys.readouterr().out
    assert "NVIDIA H200 bf16 dense 989 TFLOP/s" in printed
    ours = next(line for line in printed.splitlines() if line.split()[:1] == ["ours"])
    assert f"MFU {100 * expected_mfu:.1f} % of the datasheet peak" in ours
    assert f"{100 * out['tflops_ours'] / 750.0:.1f} % of the measured matmul peak" in ours
    assert 380 < out["tflops_ours"] < 400  # the 389 TFLOP/s at 27.0 ms


def test_train_bench_on_cuda_without_a_gpu_says_so(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # every machine: as one without a GPU
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--train", "--device", "cuda"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--device=cuda: CUDA was requested but is not available" in err and "use --device cpu" in err
