"""Streamed tokens timed in fp32 and bf16 (gptcore/generation/decode_timing.py, issues 34 and 39), and the
CPU facts it and the packed bf16 path read from the model layer (gptcore/model/cpu.py, issue 32).
No timing is compared: which dtype wins depends on the machine."""
import ast
import copy
import math
from pathlib import Path

import pytest
import torch

from gptcore.generation.decode_timing import STREAM_TOKENS, stream_seconds_per_token
from gptcore.model import cpu
from gptcore.model.config import GPTConfig
from gptcore.model.gpt import GPT

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(vocab_size=300, block_size=32, n_layer=2, n_head=4, n_embd=64)


def test_the_real_measurement_streams_tokens_and_changes_nothing():
    model = GPT(GPTConfig(**TINY), seed=1)  # left in train mode: the timing must not change it
    bf16 = copy.deepcopy(model).to(torch.bfloat16).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    forwards = {id(model): 0, id(bf16): 0}
    for m in (model, bf16):
        m.register_forward_hook(lambda mod, _args, _out: forwards.__setitem__(id(mod), forwards[id(mod)] + 1))
    fp32_s, bf16_s = stream_seconds_per_token(model, bf16, rounds=2)
    assert all(math.isfinite(t) and t > 0 for t in (fp32_s, bf16_s))
    # a stream, not one step: per model a warm-up of 2 tokens, then 2 rounds of 1 + STREAM_TOKENS tokens
    # (one forward each; the first token's forward reads the prompt)
    assert forwards == {id(model): 2 + 2 * (1 + STREAM_TOKENS), id(bf16): 2 + 2 * (1 + STREAM_TOKENS)}
    assert model.training and not bf16.training  # modes as they were
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_two_different_models_are_refused():
    small, other = GPT(GPTConfig(**TINY), seed=0), GPT(GPTConfig(**dict(TINY, n_layer=1)), seed=0)
    with pytest.raises(ValueError, match="configs differ"):
        stream_seconds_per_token(small, other.to(torch.bfloat16))


def test_cpu_facts_keep_their_old_names():
    from gptcore.benches import timing
    from gptcore.training import speed

    assert speed.cpu_flags is cpu.cpu_flags and speed.native_bf16 is cpu.native_bf16
    assert timing.cpu_name is cpu.cpu_name and cpu.cpu_name()


def test_the_model_layer_imports_nothing_above_it():
    above = ("gptcore.training", "gptcore.generation", "gptcore.interp", "gptcore.io", "gptcore.benches")
    found = []
    for path in sorted((ROOT / "gptcore" / "model").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith(above)]
    assert found == []
