"""The tokenizer that belongs to a loaded model: a folder's own tokenizer.json (checked against
the `tokenizers` library that built it), GPT-2's BPE for GPT-2-family checkpoints without one,
and None with the reason when there is nothing trustworthy."""
from __future__ import annotations

import json

import pytest
import torch

from gptcore.io.folder_tokenizer import FolderTokenizer, TokenizerChoice, choose_tokenizer
from gptcore.io.folder_tokenizer import load_tokenizer as load_chosen
from gptcore.io.loading import load, load_tokenizer
from gptcore.io.tokenizer import GPT2Tokenizer

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

SENTENCES = ["Every effort moves you to the right place.", "The quick brown fox jumps over the lazy dog.",
             "Ünïcode wörds and ✓ marks, numbers 12345.", "Every effort moves you forward."] * 4
TEXTS = ["Every effort moves you", "the lazy fox ✓", "Grüße 🙂 with bytes never seen", "  spaces\tand\nlines "]


def byte_level_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES, trainer)
    return tok


def metaspace_bpe_with_byte_fallback() -> Tokenizer:
    """Llama/SentencePiece style: "▁" for spaces, <0xNN> tokens for bytes outside the vocabulary."""
    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    trained.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=200))
    spec = json.loads(trained.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for piece in sorted(spec["vocab"], key=spec["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def gpt2_folder(folder, vocab_size: int, **config):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab_size, n_positions=32, n_embd=32, n_layer=1, n_head=2, **config)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    return folder


def test_a_folders_byte_level_tokenizer_json_is_the_models_tokenizer(tmp_path):
    tok = byte_level_bpe()
    folder = gpt2_folder(tmp_path / "model", tok.get_vocab_size())
    tok.save(str(folder / "tokenizer.json"))
    model, info = load(folder, device="cpu")
    assert info.tokenizer.kind == "folder" and info.tokenizer.path == str(folder / "tokenizer.json")
    ours, why = load_tokenizer(info)
    assert isinstance(ours, FolderTokenizer) and "own tokenizer.json" in why
    assert ours.n_vocab == tok.get_vocab_size() == model.config.vocab_size
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == tok.encode(text, add_special_tokens=False).ids
        assert ours.decode(ids) == text
        assert b"".join(ours.token_bytes(i) for i in ids) == text.encode()  # streamed generation joins these
    eot = tok.token_to_id("<|endoftext|>")
    assert ours.eot_token == ours.eos_token == eot and ours.token_str(eot) == "<|endoftext|>"
    assert ours.token_str(10_000).endswith("<id 10000>") and ours.decode([10_000]).endswith("<id 10000>")


def test_a_sentencepiece_style_tokenizer_with_its_config_and_byte_fallback(tmp_path):
    tok = metaspace_bpe_with_byte_fallback()
    folder = gpt2_folder(tmp_path / "model", tok.get_vocab_size())
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                         unk_token="<unk>").save_pretrained(folder)
    assert (folder / "tokenizer_config.json").is_file()
    _, info = load(folder, device="cpu")
    ours, _ = load_tokenizer(info)
    for text in TEXTS[:3]:
        ids = ours.encode(text)
        assert ids == tok.encode(text, add_special_tokens=False).ids
        assert ours.decode(ids) == text
        assert b"".join(ours.token_bytes(i) for i in ids) == (" " + text).encode()  # "▁" shown as the space it is
    assert any(ours.token_str(i).startswith("\ufffd") for i in ours.encode("🙂"))  # one byte of four: partial UTF-8
    assert (ours.bos_token, ours.eos_token, ours.eot_token) == (1, 2, 1)  # from tokenizer_config.json


def test_a_gpt2_folder_without_a_tokenizer_keeps_gpt2s_offline_bpe(tmp_path):
    folder = gpt2_folder(tmp_path / "model", 50257)
    _, info = load(folder, device="cpu")
    assert info.tokenizer.kind == "gpt2"
    ours, _ = load_tokenizer(info)
    assert isinstance(ours, GPT2Tokenizer) and ours.encode("Every effort moves you") == [6109, 3626, 6100, 345]


def test_a_gpt2_folder_shipping_gpt2s_own_tokenizer_json_uses_the_offline_copy(tmp_path):
    """A fine-tuned GPT-2 folder usually carries GPT-2's tokenizer.json: recognised token for token,
    so the verified offline BPE serves (same ids as the file, without importing transformers)."""
    from gptcore.io.tokenizer import _data_dir

    data = _data_dir()
    gpt2 = Tokenizer(models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe")))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.add_special_tokens(["<|endoftext|>"])
    folder = gpt2_folder(tmp_path / "finetuned", 50257)
    gpt2.save(str(folder / "tokenizer.json"))
    _, info = load(folder, device="cpu")
    assert info.tokenizer.kind == "gpt2" and "GPT-2's own BPE" in info.tokenizer.reason
    ours, _ = load_tokenizer(info)
    for text in TEXTS:
        assert ours.encode(text) == gpt2.encode(text, add_special_tokens=False).ids
    spec = json.loads((folder / "tokenizer.json").read_text())
    del spec["model"]["vocab"]["Ġthe"]  # one token different: no longer GPT-2's, so the folder's own is used
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    assert choose_tokenizer(folder / "model.safetensors", 50257).kind == "folder"


def test_a_small_vocabulary_without_its_tokenizer_gets_none_and_the_reason(tmp_path):
    folder = gpt2_folder(tmp_path / "model", 1000)
    _, info = load(folder, device="cpu")
    ours, why = load_tokenizer(info)
    assert ours is None and info.tokenizer.kind == "none" and any(why in w for w in info.warnings)
    assert "vocab_size 1,000 is smaller than GPT-2's 50,257" in why and "token ids are shown" in why


def test_a_char_level_nanogpt_names_its_unusable_meta_pkl(tmp_path):
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=65, n_positions=32, n_embd=32, n_layer=1, n_head=2))
    state = {k: (t.t().contiguous() if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else t)
             for k, t in hf.state_dict().items()}
    args = dict(n_layer=1, n_head=2, n_embd=32, block_size=32, bias=True, vocab_size=65, dropout=0.0)
    torch.save({"model": state, "model_args": args, "iter_num": 5000}, tmp_path / "ckpt.pt")
    (tmp_path / "meta.pkl").write_bytes(b"\x80\x04N.")  # a pickle of None: read safely, not a vocabulary
    _, info = load(tmp_path / "ckpt.pt", device="cpu")
    assert info.tokenizer.kind == "none" and info.tokenizer.wants == "meta.pkl"  # found, read, unusable
    ours, why = load_tokenizer(info)
    assert ours is None and "meta.pkl holds a NoneType" in why and "token ids are shown" in why


def test_a_non_gpt2_folder_without_a_tokenizer_gets_none(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 49152}))
    choice = choose_tokenizer(tmp_path / "model.safetensors", 49152)
    assert choice.kind == "none" and "llama" in choice.reason


def test_a_damaged_tokenizer_json_gives_none_and_says_so(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    ours, why = load_chosen(TokenizerChoice("folder", str(tmp_path / "tokenizer.json"), "own"))
    assert ours is None and "could not be read" in why and "token ids are shown" in why

