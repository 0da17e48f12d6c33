"""nanoGPT's character models cross both ways (issue 27), checked against nanoGPT's own code as
restated here from reading it (nothing of nanoGPT is imported):

- prepare.py (data/shakespeare_char): sorted characters, stoi/itos, first 90 % train, uint16
  train.bin/val.bin, meta.pkl = {'vocab_size', 'itos', 'stoi'} pickled;
- sample.py: ckpt.pt's model_args/model into nanoGPT's GPT, then
  `os.path.join('data', checkpoint['config']['dataset'], 'meta.pkl')` relative to where it runs
  ("No meta.pkl found, assuming GPT-2 encodings..." otherwise), its stoi/itos to encode/decode;
  generation with top_k=1 (only the largest logit survives) makes its text deterministic;
- train.py's `init_from='resume'`: model, optimizer and iter_num from out_dir/ckpt.pt, then its
  loop (nanogpt_oracle.reference_step).
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from gptcore.io.loading import load, load_tokenizer
from gptcore.train import main
from gptcore.training.trace import read_trace
from nanogpt_oracle import NanoGPTShaped, reference_optimizer, reference_step, train_py_settings

TEXT = "".join(np.random.default_rng(0).choice(list("the cat sat on a mat; dog ran far.\n"), 3000))
TINY = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2", "--eval_iters=1",
        "--eval_interval=4", "--probe_interval=0", "--warmup_iters=2", "--lr_decay_iters=40", "--dtype=float32",
        "--device=cpu"]


# -- nanoGPT, restated ------------------------------------------------------------------------------
def prepare_py(folder: Path, data: str) -> None:
    """data/shakespeare_char/prepare.py on `data` (no download), writing into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    chars = sorted(list(set(data)))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    n = len(data)
    train_ids = np.array([stoi[c] for c in data[:int(n * 0.9)]], dtype=np.uint16)
    val_ids = np.array([stoi[c] for c in data[int(n * 0.9):]], dtype=np.uint16)
    train_ids.tofile(folder / "train.bin")
    val_ids.tofile(folder / "val.bin")
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)


def sample_py(out_dir: Path, start: str, max_new_tokens: int = 12) -> tuple[str, str]:
    """sample.py --init_from=resume --out_dir=OUT --top_k=1 --num_samples=1, from the current folder:
    (what it printed about meta.pkl, the sample)."""
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location="cpu", weights_only=True)
    model = NanoGPTShaped(**checkpoint["model_args"])
    state_dict = checkpoint["model"]
    for k in list(state_dict):
        if k.startswith("_orig_mod."):
            state_dict[k[len("_orig_mod."):]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    model.eval()
    load_meta = False
    if "config" in checkpoint and "dataset" in checkpoint["config"]:
        meta_path = os.path.join("data", checkpoint["config"]["dataset"], "meta.pkl")
        load_meta = os.path.exists(meta_path)
    if not load_meta:
        return "No meta.pkl found, assuming GPT-2 encodings...", ""
    with open(meta_path, "rb") as f:
        meta = pickle.load(f)  # nanoGPT's own way; the file is the one this test (or gptcore) wrote
    stoi, itos = meta["stoi"], meta["itos"]
    x = torch.tensor([stoi[c] for c in start], dtype=torch.long)[None, ...]
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(x[:, -checkpoint["model_args"]["block_size"]:])[:, -1, :]
            x = torch.cat([x, logits.argmax(-1, keepdim=True)], dim=1)  # top_k=1: the one survivor
    return f"Loading meta from {meta_path}...", "".join(itos[i] for i in x[0].tolist())


def ours(source, start: str, max_new_tokens: int = 12, **kw) -> tuple[str, object]:
    """gptcore.load + its tokenizer, greedy: (the text, the tokenizer choice)."""
    model, info = load(source, device="cpu", **kw)
    tok, _ = load_tokenizer(info)
    if tok is None:
        return "", info.tokenizer
    x = torch.tensor([tok.encode(start)])
    with torch.no_grad():
        for _ in range(max_new_tokens):
            x = torch.cat([x, model(x[:, -model.config.block_size:])[:, -1, :].argmax(-1, keepdim=True)], dim=1)
    return tok.decode(x[0].tolist()), info.tokenizer


def nanogpt_out_dir(out_dir: Path, dataset: str, vocab: int, seed: int = 7, steps: int = 0, batches=None,
                    config: dict | None = None):
    """What nanoGPT's train.py leaves in out_dir: ckpt.pt with model (torch.compile's prefix),
    optimizer, model_args, iter_num, best_val_loss and config (its globals, dataset among them)."""
    args = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, bias=False, vocab_size=vocab, dropout=0.0)
    torch.manual_seed(seed)
    model = NanoGPTShaped(**args)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    tc = _nano_tc(config or {})
    optimizer = reference_optimizer(model, tc.weight_decay, tc.learning_rate, (tc.beta1, tc.beta2))
    for it in range(steps):
        x, y = batches(it)
        reference_step(model, optimizer, it, [(x[:2], y[:2]), (x[2:], y[2:])], tc)
    out_dir.mkdir(parents=True, exist_ok=True)
    nano_config = {"out_dir": str(out_dir), "eval_interval": 2000, "init_from": "scratch", "dataset": dataset,
                   "device": "cuda", "dtype": "bfloat16", "compile": True, "wandb_log": False, **(config or {})}
    torch.save({"model": {f"_orig_mod.{k}": v for k, v in model.state_dict().items()},
                "optimizer": optimizer.state_dict(), "model_args": args, "iter_num": steps,
                "best_val_loss": torch.tensor(2.9), "config": nano_config}, out_dir / "ckpt.pt")
    return model, optimizer


def _nano_tc(config: dict):
    return train_py_settings(**config)


# -- app -> nanoGPT ---------------------------------------------------------------------------------
def test_a_run_on_a_nanogpt_data_folder_is_sampled_by_sample_py(tmp_path, monkeypatch):
    repo = tmp_path / "nanoGPT"
    prepare_py(repo / "data" / "tiny_char", TEXT)
    assert main([f"--data={repo / 'data' / 'tiny_char'}", f"--out_dir={repo / 'out-tiny'}", *TINY,
                 "--max_iters=4"]) == 0
    ckpt = torch.load(repo / "out-tiny" / "ckpt.pt", weights_only=True)
    assert ckpt["config"]["dataset"] == "tiny_char"  # as nanoGPT's train.py records it
    monkeypatch.chdir(repo)  # sample.py runs from the folder above data/
    said, text = sample_py(repo / "out-tiny", "the ")
    assert said == f"Loading meta from {os.path.join('data', 'tiny_char', 'meta.pkl')}..."
    assert text.startswith("the ") and len(text) == 16
    assert ours(repo / "out-tiny", "the ")[0] == text  # and the app reads it the same way


def test_a_run_on_a_text_writes_nanogpts_data_folder_that_sample_py_finds(tmp_path, monkeypatch):
    text_file = tmp_path / "tiny.txt"
    text_file.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    assert main([f"--data={text_file}", f"--out_dir={out}", *TINY, "--max_iters=4"]) == 0
    written = out / "data" / "tiny_char"
    prepare_py(tmp_path / "reference", TEXT)
    for name in ("train.bin", "val.bin"):  # the same ids, split the same way, as prepare.py's
        assert (written / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name
    with open(written / "meta.pkl", "rb") as f, open(tmp_path / "reference" / "meta.pkl", "rb") as g:
        assert pickle.load(f) == pickle.load(g)
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert Path(ckpt["config"]["dataset"]) == written.resolve()
    elsewhere = tmp_path / "nanoGPT"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # nanoGPT's root (where its configurator.py is), not the run folder
    said, sampled = sample_py(out, "cat ")
    assert said.startswith("Loading meta from") and sampled.startswith("cat ") and len(sampled) == 16
    assert ours(out, "cat ")[0] == sampled


def test_readme_says_how_to_sample_a_run_with_nanogpt():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "sample.py --out_dir=" in readme and "meta.pkl" in readme


# -- nanoGPT -> app ---------------------------------------------------------------------------------
def test_nanogpts_char_checkpoint_opens_with_the_meta_pkl_its_dataset_names(tmp_path, monkeypatch):
    repo = tmp_path / "nanoGPT"
    prepare_py(repo / "data" / "shk_char", TEXT)
    vocab = len(set(TEXT))
    nanogpt_out_dir(repo / "out-shk", "shk_char", vocab)
    monkeypatch.chdir(repo)
    _, reference = sample_py(repo / "out-shk", "dog ")
    monkeypatch.chdir(tmp_path)  # the app runs anywhere: found next to the out_dir
    text, choice = ours(repo / "out-shk", "dog ")
    assert choice.kind == "meta" and "shk_char" in choice.reason and text == reference

    lonely = tmp_path / "copied" / "ckpt.pt"  # the checkpoint alone, away from its data
    lonely.parent.mkdir()
    lonely.write_bytes((repo / "out-shk" / "ckpt.pt").read_bytes())
    monkeypatch.chdir(repo)  # from the folder above data/, as sample.py
    assert ours(lonely, "dog ")[1].kind == "meta"
    monkeypatch.chdir(tmp_path)
    text, choice = ours(lonely, "dog ")
    assert text == "" and choice.kind == "none" and choice.wants == "meta.pkl"
    assert "'shk_char'" in choice.reason and "data/shk_char/meta.pkl" in choice.reason
    text, choice = ours(lonely, "dog ", meta=repo / "data" / "shk_char" / "meta.pkl")  # the user's pick
    assert choice.kind == "meta" and text == reference
    prepare_py(tmp_path / "other", TEXT + "".join(chr(0x100 + i) for i in range(80)))  # another data's meta
    text, choice = ours(lonely, "dog ", meta=tmp_path / "other" / "meta.pkl")
    assert choice.kind == "none" and choice.wants == "meta.pkl" and "belongs to other data" in choice.reason


def test_the_command_line_reads_nanogpts_characters_too(tmp_path, monkeypatch, capsys):
    """`python -m gptcore info|generate` use the model's own tokenizer: the meta.pkl found from
    config['dataset'], or `--meta`; greedy generation prints sample.py's top_k=1 text."""
    from gptcore.__main__ import main as cli

    repo = tmp_path / "nanoGPT"
    prepare_py(repo / "data" / "shk_char", TEXT)
    nanogpt_out_dir(repo / "out-shk", "shk_char", len(set(TEXT)))
    monkeypatch.chdir(repo)
    _, reference = sample_py(repo / "out-shk", "dog ")
    assert cli(["info", str(repo / "out-shk"), "--device", "cpu"]) == 0
    assert "characters — nanoGPT's character vocabulary" in capsys.readouterr().out
    lonely = tmp_path / "copied"
    lonely.mkdir()
    (lonely / "ckpt.pt").write_bytes((repo / "out-shk" / "ckpt.pt").read_bytes())
    monkeypatch.chdir(tmp_path)
    args = ["generate", "--model", str(lonely), "--prompt", "dog ", "--temperature", "0", "--max-new-tokens", "12",
            "--device", "cpu"]
    assert cli(args) == 2  # not found: the prompt would have to be ids, and the error says why
    err = capsys.readouterr().err
    assert "type numbers separated by spaces" in err and "data/shk_char/meta.pkl" in err
    assert cli([*args, "--meta", str(repo / "data" / "shk_char" / "meta.pkl")]) == 0
    assert capsys.readouterr().out.strip("\n") == reference


def test_a_meta_pkl_carrying_code_is_refused_and_never_runs(tmp_path, monkeypatch):
    repo = tmp_path / "nanoGPT"
    prepare_py(repo / "data" / "evil_char", TEXT)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (repo / "data" / "evil_char" / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 3, "itos": Payload()}))
    nanogpt_out_dir(repo / "out", "evil_char", len(set(TEXT)))
    _, info = load(repo / "out", device="cpu")
    tok, why = load_tokenizer(info)
    assert tok is None and "refused to read" in why and "system" in why and "token ids are shown" in why
    assert not marker.exists()


# -- nanoGPT's out_dir resumed here -----------------------------------------------------------------
def test_resume_continues_nanogpts_own_out_dir_as_its_loop_would(tmp_path):
    from gptcore.training.data import load_corpus

    repo = tmp_path / "nanoGPT"
    prepare_py(repo / "data" / "tiny_char", TEXT)
    corpus = load_corpus(repo / "data" / "tiny_char")
    settings = dict(learning_rate=3e-3, min_lr=3e-4, warmup_iters=2, lr_decay_iters=20, batch_size=2,
                    gradient_accumulation_steps=2, eval_iters=1, eval_interval=4, weight_decay=0.1,
                    beta1=0.9, beta2=0.95, grad_clip=1.0, decay_lr=True, max_iters=5000)

    def batches(it):  # the batches our loop draws at iteration `it` (seed 1337, nanoGPT's)
        return corpus.batch("train", it, 4, 16, 1337)

    model, optimizer = nanogpt_out_dir(repo / "out-tiny", "tiny_char", corpus.vocab_size, steps=3,
                                       batches=batches, config=settings)
    assert main(["--resume", f"--out_dir={repo / 'out-tiny'}", "--max_iters=5", "--dtype=float32",
                 "--device=cpu"]) == 0
    assert main(["--init_from=resume", f"--out_dir={repo / 'out-tiny'}", "--max_iters=7", "--dtype=float32",
                 "--device=cpu"]) == 0
    trained = [r for r in read_trace(repo / "out-tiny" / "trace.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in trained] == [3, 4, 5, 6]  # from nanoGPT's iter_num on
    tc = _nano_tc(settings)
    for record in trained:
        x, y = batches(record["step"])
        theirs = reference_step(model, optimizer, record["step"], [(x[:2], y[:2]), (x[2:], y[2:])], tc)
        assert record["loss"] == pytest.approx(theirs, abs=1e-4), record["step"]
        assert record["lr"] == pytest.approx(optimizer.param_groups[0]["lr"])
    ckpt = torch.load(repo / "out-tiny" / "ckpt.pt", weights_only=True)
    assert ckpt["iter_num"] == 7 and "model_args" in ckpt  # still nanoGPT's: it can resume it in turn
    NanoGPTShaped(**ckpt["model_args"]).load_state_dict(ckpt["model"], strict=True)


def test_resuming_nanogpts_out_dir_without_its_data_names_the_fix(tmp_path, capsys):
    nanogpt_out_dir(tmp_path / "out", "shakespeare_char", 65)
    assert main(["--init_from=resume", f"--out_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "'shakespeare_char'" in err and "--data=PATH/TO/data/shakespeare_char" in err
