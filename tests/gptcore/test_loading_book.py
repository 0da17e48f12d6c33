"""The checkpoints readers of *Build a Large Language Model (From Scratch)* save from its
`GPTModel`: a bare state dict (`model.pth`), the resume-training dict with an optimizer
state, and a safetensors copy. The reference is the book's model written here from the
chapter's description (GELU with the tanh approximation, LayerNorm with scale/shift and
eps 1e-5, separate query/key/value projections, a causal `mask` buffer per block, an
untied bias-free output head); loading must give its logits to 1e-5."""
from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from gptcore.io.checkpoints import LoadError
from gptcore.io.loading import load

safetensors_torch = pytest.importorskip("safetensors.torch")

BOOK_CFG = dict(vocab_size=300, context_length=32, emb_dim=64, n_heads=4, n_layers=2, drop_rate=0.1, qkv_bias=False)


# -- the book's GPTModel, from the chapter's description ---------------------------------------------

class BookLayerNorm(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(width))
        self.shift = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        centred = x - x.mean(dim=-1, keepdim=True)
        spread = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * centred / torch.sqrt(spread + self.eps) + self.shift


class BookGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


class BookFeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["emb_dim"]
        self.layers = nn.Sequential(nn.Linear(d, 4 * d), BookGELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return self.layers(x)


class BookMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias):
        super().__init__()
        self.heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, t, _ = x.shape

        def heads(proj):
            return proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (b, h, t, hd)

        q, k, v = heads(self.W_query), heads(self.W_key), heads(self.W_value)
        scores = q @ k.transpose(2, 3)  # (b, h, t, t)
        scores = scores.masked_fill(self.mask.bool()[:t, :t], -torch.inf)
        weights = self.dropout(torch.softmax(scores / self.head_dim ** 0.5, dim=-1))
        context = (weights @ v).transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.out_proj(context)


class BookTransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["emb_dim"]
        self.att = BookMultiHeadAttention(d, d, cfg["context_length"], cfg["drop_rate"], cfg["n_heads"],
                                          cfg["qkv_bias"])
        self.ff = BookFeedForward(cfg)
        self.norm1, self.norm2 = BookLayerNorm(d), BookLayerNorm(d)
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        x = x + self.drop_shortcut(self.att(self.norm1(x)))
        return x + self.drop_shortcut(self.ff(self.norm2(x)))


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[BookTransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = BookLayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop_emb(self.tok_emb(idx) + self.pos_emb(torch.arange(t, device=idx.device)))
        return self.out_head(self.final_norm(self.trf_blocks(x)))


def book_model(seed: int = 0, **overrides) -> GPTModel:
    torch.manual_seed(seed)
    model = GPTModel({**BOOK_CFG, **overrides})
    with torch.no_grad():  # scale/shift away from 1/0 so that every LayerNorm parameter moves the logits
        for name, p in model.named_parameters():
            if name.endswith((".scale", ".shift")):
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, BOOK_CFG["vocab_size"], (2, 20), generator=torch.Generator().manual_seed(3))


def assert_same_logits(ours, book, idx):
    with torch.no_grad():
        want, got = book(idx), ours(idx)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


# -- the layouts ---------------------------------------------------------------------------------------

def test_book_state_dict_model_pth_with_n_head_given(tokens, tmp_path):
    book = book_model()
    assert "trf_blocks.0.att.mask" in book.state_dict()  # the buffer really is saved, and must be dropped
    torch.save(book.state_dict(), tmp_path / "model.pth")
    model, info = load(tmp_path / "model.pth", n_head=4, device="cpu")
    assert_same_logits(model, book, tokens)
    c = info.config
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size) == (2, 4, 64, 32, 300)
    assert not c.use_qkv_bias and c.bias and not info.tied and model.unembed.weight is not model.embed.weight
    assert "GPTModel" in info.format and info.name == f"{tmp_path.name}/model.pth"
    assert not any("head count" in w for w in info.warnings)
    assert info.trained is None and info.status == "loaded"  # a bare state dict says nothing of training


def test_book_head_count_from_a_sidecar_config_in_the_books_own_keys(tokens, tmp_path):
    book = book_model(seed=1)
    torch.save(book.state_dict(), tmp_path / "model.pth")
    (tmp_path / "config.json").write_text(json.dumps(BOOK_CFG))  # GPT_CONFIG_124M-style: "n_heads"
    for source in (tmp_path / "model.pth", tmp_path):  # the file, or its folder (config.json there is no HF config)
        model, info = load(source, device="cpu")
        assert info.config.n_head == 4 and not any("head count" in w for w in info.warnings)
        assert_same_logits(model, book, tokens)


def test_book_head_count_guessed_with_a_warning_that_names_the_fix(tmp_path):
    torch.save(book_model(seed=2).state_dict(), tmp_path / "model.pth")
    _, info = load(tmp_path / "model.pth", guess_heads=True, device="cpu")  # a guess only on request
    assert info.config.n_head == 1  # 64 wide, not a GPT-2 width: 64-wide heads
    warning = next(w for w in info.warnings if "head count" in w)
    assert "n_head=1" in warning and "--n-head" in warning and "config.json" in warning


def test_book_training_dict_with_optimizer_state_and_qkv_bias(tokens, tmp_path):
    """The book's resume-training file: the optimizer state is skipped (with a note), never an error,
    and it is the evidence that these weights were trained."""
    book = book_model(seed=4, qkv_bias=True)
    book.train()
    optimizer = torch.optim.AdamW(book.parameters(), lr=4e-4, weight_decay=0.1)
    batch = torch.randint(0, BOOK_CFG["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(5))
    loss = nn.functional.cross_entropy(book(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    book.eval()
    path = tmp_path / "model_and_optimizer.pth"
    torch.save({"model_state_dict": book.state_dict(), "optimizer_state_dict": optimizer.state_dict()}, path)
    model, info = load(path, n_head=4, device="cpu")
    assert_same_logits(model, book, tokens)
    assert info.config.use_qkv_bias and model.blocks[0].attn.c_attn.bias is not None
    assert any("optimizer_state_dict" in w and "ignored" in w for w in info.warnings)
    assert info.trained is True and info.status == "trained" and "optimizer" in info.provenance


def test_book_model_saved_as_safetensors(tokens, tmp_path):
    book = book_model(seed=6)
    safetensors_torch.save_file(book.state_dict(), tmp_path / "book.safetensors")
    model, info = load(tmp_path / "book.safetensors", n_head=4, device="cpu")
    assert_same_logits(model, book, tokens)
    assert "GPTModel" in info.format and "safetensors" in info.format


def test_book_checkpoint_generates_like_the_book(tokens, tmp_path):
    """Greedy decoding with our KV cache picks the book model's own argmax at every step."""
    from gptcore.generation.streaming import generate

    book = book_model(seed=7)
    torch.save(book.state_dict(), tmp_path / "model.pth")
    model, _ = load(tmp_path / "model.pth", n_head=4, device="cpu")
    prompt = tokens[0, :5].tolist()
    ours = [s.token for s in generate(model, prompt, max_new_tokens=8, temperature=0.0)]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(8):
            ids = torch.cat([ids, book(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert ours == ids[0, 5:].tolist()


def test_book_checkpoint_with_a_missing_projection_is_refused_by_name(tmp_path):
    state = book_model().state_dict()
    del state["trf_blocks.1.att.W_key.weight"]
    torch.save(state, tmp_path / "model.pth")
    with pytest.raises(LoadError) as raised:
        load(tmp_path / "model.pth", n_head=4, device="cpu")
    text = str(raised.value)
    assert "blocks.1.attn.c_attn.weight" in text and "trf_blocks.1.att.W_query.weight" in text
