"""`python -m gptcore count`: the breakdown table and both totals, overrides, and a clear
error (non-zero exit, no traceback) for a bad config."""
import re
import subprocess
import sys

import pytest

from gptcore import GPTConfig, count_parameters
from gptcore.__main__ import main
from gptcore.model.params import COMPONENTS


def _figure(out: str, label: str) -> int:
    match = re.search(rf"^{re.escape(label)}\s+([\d,]+)", out, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{out}"
    return int(match.group(1).replace(",", ""))


def test_module_entry_point_prints_table_and_both_totals():
    out = subprocess.run([sys.executable, "-m", "gptcore", "count", "--preset", "gpt2"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert _figure(out.stdout, "tied total") == 124_439_808
    assert _figure(out.stdout, "untied total") == 163_037_184
    assert _figure(out.stdout, "total (unique)") == 7_087_872  # per block column, then the total
    assert "124,439,808" in out.stdout.split("total (unique)")[1].splitlines()[0]
    for name in COMPONENTS:
        assert name in out.stdout
    assert out.stderr == ""


def test_untied(capsys):
    assert main(["count", "--preset", "gpt2", "--untied"]) == 0
    out = capsys.readouterr().out
    assert "tie_weights=False" in out
    unique_row = out.split("total (unique)")[1].splitlines()[0]
    assert "163,037,184" in unique_row
    assert re.search(r"^output head\s+-\s+38,597,376", out, re.MULTILINE)
    assert _figure(out, "tied total") == 124_439_808 and _figure(out, "untied total") == 163_037_184


@pytest.mark.parametrize("argv,overrides", [
    (["--n-layer", "24"], dict(n_layer=24)),
    (["--preset", "gpt2-medium", "--no-bias"], dict(bias=False)),
    (["--n-embd", "512", "--n-head", "8", "--vocab-size", "50304", "--block-size", "256", "--mlp-ratio", "2"],
     dict(n_embd=512, n_head=8, vocab_size=50304, block_size=256, mlp_ratio=2.0)),
])
def test_overrides_change_the_counts(capsys, argv, overrides):
    assert main(["count", *argv]) == 0
    out = capsys.readouterr().out
    preset = argv[argv.index("--preset") + 1] if "--preset" in argv else "gpt2"
    expected = count_parameters(GPTConfig.preset(preset, **overrides))
    assert _figure(out, "tied total") == expected.tied_total
    assert _figure(out, "untied total") == expected.untied_total
    assert _figure(out, "non-embedding") == expected.non_embedding
    assert expected.tied_total != 124_439_808
    if "--n-layer" in argv:
        assert expected.tied_total == 124_439_808 + 12 * 7_087_872  # twelve more gpt2 blocks
        assert "n_layer=24" in out


def test_bad_config_exits_non_zero_with_the_config_error(capsys):
    assert main(["count", "--n-head", "7"]) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: n_head: n_embd=768 is not divisible by n_head=7")
    assert "e.g. 6" in captured.err and "Traceback" not in captured.err


def test_bad_config_through_the_real_command_line():
    out = subprocess.run([sys.executable, "-m", "gptcore", "count", "--n-layer", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "n_layer: must be positive" in out.stderr and "Traceback" not in out.stderr


def test_unknown_preset_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["count", "--preset", "gpt5"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_modern_flags_print_the_parts_and_each_difference(capsys):
    argv = ["count", "--preset", "gpt2", "--pos-embedding", "sinusoidal", "--norm", "rmsnorm", "--mlp", "swiglu",
            "--mlp-hidden", "2048", "--n-kv-head", "4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    cfg = GPTConfig.preset("gpt2", pos_embedding="sinusoidal", norm="rmsnorm", mlp="swiglu", mlp_hidden=2048, n_kv_head=4)
    assert _figure(out, "tied total") == count_parameters(cfg).tied_total
    assert "pos_embedding=sinusoidal, norm=rmsnorm, mlp=swiglu, mlp_hidden=2048, n_kv_head=4" in out
    assert "parts: sinusoidal positions, RMSNorm, SwiGLU MLP 2,048, grouped-query attention 12/4" in out
    assert "  sinusoidal: −786,432 vs learned" in out
    assert "  grouped-query 12/4: K and V projections ×1/3" in out
    assert main(["count", "--preset", "gpt2"]) == 0
    assert "parts:" not in capsys.readouterr().out  # GPT-2 itself: nothing to explain


def test_modern_flag_choices_are_checked(capsys):
    with pytest.raises(SystemExit):
        main(["count", "--norm", "batchnorm"])
    assert "invalid choice" in capsys.readouterr().err
    assert main(["count", "--pos-embedding", "rope", "--n-head", "12", "--n-embd", "780"]) == 2  # head_dim 65
    assert "error: pos_embedding: rotary positions" in capsys.readouterr().err


def test_info_on_a_llama_folder_names_its_parts(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    assert main(["info", str(tmp_path), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^parts\s+rotary positions \(base 10000\), RMSNorm, SwiGLU MLP 48, grouped-query attention 4/2$",
                     out, re.MULTILINE)
    assert "  grouped-query 4/2: K and V projections ×1/2" in out
