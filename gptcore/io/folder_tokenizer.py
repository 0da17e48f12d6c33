"""Which tokenizer belongs to a loaded model, and a folder's own `tokenizer.json` behind the
interface the app uses on `GPT2Tokenizer` (`encode`, `decode`, `token_str`, `token_bytes`,
`n_vocab`, `eot_token`).

Why a choice at all: GPT-2's BPE only fits models trained with it. A Hugging Face folder that
ships a `tokenizer.json` was trained with that one (its ids mean its own tokens); a GPT-2-family
checkpoint without one keeps the offline GPT-2 tokenizer; anything else (a character-level
nanoGPT, a Llama folder without its tokenizer) has none we can trust, and saying so lets the app
show token ids instead of text that means something else.

transformers is imported only when a folder tokenizer is actually loaded (importing gptcore
stays fast), and only local files are read (`local_files_only`: never the network).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from gptcore.model.config import GPT2_VOCAB

TOKENIZER_FILE = "tokenizer.json"
_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # sentencepiece's byte fallback
_METASPACE = "\N{LOWER ONE EIGHTH BLOCK}"  # "▁": sentencepiece's visible space
_GPT2_TOKENIZER_JSON_MAX = 8_000_000  # GPT-2's own tokenizer.json: 1.4-3.6 MB as tokenizers writes it
# Special tokens that end a text when the tokenizer's config names no eos token.
_EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<|im_end|>")


@dataclass(frozen=True)
class TokenizerChoice:
    """kind: "gpt2" (GPT-2's BPE, offline), "folder" (`path` is a tokenizer.json), "char" (`path` is a
    training run's char_vocab.json), "meta" (`path` is nanoGPT's meta.pkl) or "none";
    `reason` says why, in words a status line can show. `wants`: for "none", the file that would
    give the model its text ("meta.pkl" for a nanoGPT char checkpoint whose data folder was not
    found), so the app can ask for it."""

    kind: str
    path: str = ""
    reason: str = ""
    wants: str = ""

    def describe(self) -> str:
        return {"gpt2": "GPT-2 (offline BPE)", "folder": self.path, "char": "characters",
                "meta": "characters"}.get(self.kind, "none") + \
            f" — {self.reason}"


def choose_tokenizer(weights: Path, vocab_size: int, *, nanogpt: bool = False, dataset: str | None = None,
                     meta: Path | None = None) -> TokenizerChoice:
    """The tokenizer for the weights at `weights` (a file; its folder is searched). `dataset`: a
    training checkpoint's config['dataset'], whose data/<dataset>/meta.pkl (nanoGPT's char
    vocabulary) is looked for as sample.py would; `meta`: a meta.pkl the user chose."""
    if meta is not None:
        return _meta_choice(Path(meta), vocab_size, "chosen by the user")
    folder = weights.parent
    own = folder / TOKENIZER_FILE
    model_type = _model_type(folder)
    from gptcore.io.char_tokenizer import find_char_vocab

    chars = find_char_vocab(weights)  # a gptcore training run's character vocabulary
    if chars is not None and not own.is_file():
        return TokenizerChoice("char", str(chars), f"the character vocabulary its training run saved ({chars.name})")
    if own.is_file():
        if model_type in (None, "gpt2") and is_gpt2_bpe(own):
            return TokenizerChoice("gpt2", reason=f"its {TOKENIZER_FILE} is GPT-2's own BPE (the verified offline "
                                                  f"copy is used)")
        return TokenizerChoice("folder", str(own), f"the model's own {TOKENIZER_FILE}")
    if model_type not in (None, "gpt2"):
        return TokenizerChoice("none", reason=f"no {TOKENIZER_FILE} next to this {model_type} model, whose "
                                              f"vocabulary is its own: token ids are shown instead of text")
    if vocab_size < GPT2_VOCAB:
        return _small_vocab_choice(weights, vocab_size, nanogpt, dataset)
    return TokenizerChoice("gpt2", reason="a GPT-2-family model without a tokenizer of its own")


def _small_vocab_choice(weights: Path, vocab_size: int, nanogpt: bool, dataset: str | None) -> TokenizerChoice:
    """A vocabulary of its own: nanoGPT's meta.pkl found from config['dataset'] (or beside the
    checkpoint), else none, saying why and which file would help."""
    from gptcore.io.nanogpt_meta import META_FILE, find_meta, meta_candidates

    found = find_meta(weights, dataset)
    beside = weights.parent / META_FILE
    if found is None and nanogpt and beside.is_file():
        found = beside
    if found is not None:
        return _meta_choice(found, vocab_size, f"config['dataset'] = {dataset!r}" if dataset else "beside the checkpoint")
    small = _small(vocab_size)
    if dataset:
        looked = ", ".join(str(p) for p in meta_candidates(weights, dataset)[:3])
        return TokenizerChoice("none", wants=META_FILE, reason=(
            f"{small}; its checkpoint names dataset {dataset!r}, but no data/{dataset}/{META_FILE} was found "
            f"(looked at {looked}): open that meta.pkl to see text, else token ids are shown"))
    if nanogpt:
        return TokenizerChoice("none", wants=META_FILE, reason=(
            f"{small} and its checkpoint names no dataset: open the {META_FILE} its data was prepared with to "
            f"see text, else token ids are shown"))
    return TokenizerChoice("none", reason=f"{small} and no {TOKENIZER_FILE} came with it: token ids are shown "
                                          f"instead of text")


def _small(vocab_size: int) -> str:
    return f"vocab_size {vocab_size:,} is smaller than GPT-2's {GPT2_VOCAB:,} (a character-level or other " \
           f"vocabulary of its own)"


def _meta_choice(path: Path, vocab_size: int, how: str) -> TokenizerChoice:
    """"meta" when `path` is a char meta.pkl that fits the model (read here, a few kB, never run),
    else "none" saying what is wrong with it and wanting another (the app asks again)."""
    from gptcore.io.nanogpt_meta import META_FILE, MetaError, meta_chars, read_meta

    try:
        chars = meta_chars(read_meta(path), path)
    except MetaError as exc:
        return TokenizerChoice("none", wants=META_FILE, reason=f"{_small(vocab_size)}; {exc}: token ids are shown "
                                                               f"instead of text")
    if len(chars) > vocab_size:
        return TokenizerChoice("none", wants=META_FILE, reason=(
            f"{_small(vocab_size)}; {path} ({how}) has {len(chars):,} characters, more than the model's "
            f"{vocab_size:,} ids: it belongs to other data, so token ids are shown instead of text"))
    return TokenizerChoice("meta", str(path), f"nanoGPT's character vocabulary {path} ({how})")


def is_gpt2_bpe(path: Path) -> bool:
    """Is this tokenizer.json GPT-2's BPE, token for token? (A fine-tuned GPT-2 folder usually
    ships it.) Then the offline copy serves: same ids, no transformers import, and typed
    "<|endoftext|>" stays text as everywhere else in the app."""
    from gptcore.io.tokenizer import ENDOFTEXT, EOT_ID, _data_dir

    try:
        if path.stat().st_size > _GPT2_TOKENIZER_JSON_MAX:
            return False
        spec = json.loads(path.read_text(encoding="utf-8"))
        model = spec["model"]
        added = {t["content"]: t["id"] for t in spec.get("added_tokens") or []}
        byte_level = "ByteLevel" in json.dumps(spec.get("pre_tokenizer"))
        if model.get("type") != "BPE" or added != {ENDOFTEXT: EOT_ID} or not byte_level:
            return False
        data = _data_dir()
        encoder = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        lines = (data / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
        return model.get("vocab") == encoder and merges == [tuple(line.split()) for line in lines if line.strip()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _model_type(folder: Path) -> str | None:
    try:
        value = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def load_tokenizer(choice: TokenizerChoice):
    """(tokenizer, reason): GPT2Tokenizer, FolderTokenizer or None, with why when None."""
    if choice.kind == "gpt2":
        from gptcore.io.tokenizer import gpt2_tokenizer

        return gpt2_tokenizer(), choice.reason
    if choice.kind == "folder":
        try:
            return FolderTokenizer.from_file(Path(choice.path)), choice.reason
        except (OSError, ValueError, ImportError) as exc:
            return None, (f"{choice.path} could not be read ({exc.__class__.__name__}: {exc}); "
                          f"token ids are shown instead")
    if choice.kind in ("char", "meta"):
        from gptcore.io.char_tokenizer import CharTokenizer

        try:
            read = CharTokenizer.from_file if choice.kind == "char" else CharTokenizer.from_meta
            return read(choice.path), choice.reason
        except ValueError as exc:
            return None, f"{exc}; token ids are shown instead"
    return None, choice.reason


class FolderTokenizer:
    """A Hugging Face fast tokenizer with GPT2Tokenizer's interface.

    `encode` adds no special tokens (the app decides whether to start with `eot_token`, as for
    GPT-2); `token_bytes` gives each token's own bytes, so streamed generation can join partial
    UTF-8 sequences exactly as with GPT-2's BPE.
    """

    def __init__(self, hf, *, byte_level: bool, name: str = "", bos: int | None = None, eos: int | None = None):
        from gptcore.io.tokenizer import _byte_alphabet  # (tiktoken) only once a folder tokenizer is in use
        self._hf = hf
        self.name = name
        self.n_vocab = len(hf)
        self._byte_level = byte_level
        self._bytes_of = _byte_alphabet()  # GPT-2's printable stand-in character -> byte
        self._special = {i: t.content for i, t in hf.added_tokens_decoder.items()}
        # The tokenizer's own special tokens first, then the model config's ids, then a known name.
        self.bos_token = _in_range(hf.bos_token_id, self.n_vocab)
        if self.bos_token is None:
            self.bos_token = _in_range(bos, self.n_vocab)
        end = _in_range(hf.eos_token_id, self.n_vocab)
        if end is None:
            end = _in_range(eos, self.n_vocab)
        if end is None:
            end = next((i for i, text in sorted(self._special.items()) if text in _EOS_NAMES), None)
        self.eos_token = end
        # What the app starts a text with (GPT-2 uses <|endoftext|> for both): bos, else eos.
        self.eot_token = self.bos_token if self.bos_token is not None else self.eos_token

    @classmethod
    def from_file(cls, path: Path) -> "FolderTokenizer":
        """From a tokenizer.json; its folder's tokenizer_config.json (special tokens) is read too."""
        from transformers import PreTrainedTokenizerFast

        spec = json.loads(Path(path).read_text(encoding="utf-8"))  # ValueError if damaged
        folder = Path(path).parent
        if (folder / "tokenizer_config.json").is_file() and Path(path).name == TOKENIZER_FILE:
            hf = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
        else:
            hf = PreTrainedTokenizerFast(tokenizer_file=str(path))
        ids = _model_special_ids(folder)
        return cls(hf, byte_level="ByteLevel" in json.dumps(spec.get("decoder")), name=folder.name, **ids)

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=False))

    def token_bytes(self, token: int) -> bytes:
        if not 0 <= token < self.n_vocab:
            from gptcore.io.tokenizer import UNKNOWN_TOKEN

            return UNKNOWN_TOKEN.format(token).encode()
        if token in self._special:
            return self._special[token].encode()
        piece = self._hf.convert_ids_to_tokens(token)
        if self._byte_level and all(ch in self._bytes_of for ch in piece):
            return bytes(self._bytes_of[ch] for ch in piece)
        byte = _BYTE_PIECE.match(piece)
        if byte:
            return bytes([int(byte.group(1), 16)])
        return piece.replace(_METASPACE, " ").encode()

    def token_str(self, token: int) -> str:
        """One token as text; a partial UTF-8 sequence shows as its replacement character."""
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def decode(self, tokens, errors: str = "replace") -> str:
        tokens = [int(t) for t in tokens]
        if all(0 <= t < self.n_vocab for t in tokens):
            return self._hf.decode(tokens, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors=errors)


def _model_special_ids(folder: Path) -> dict:
    """bos/eos ids from the model's config.json, for tokenizers whose own config names none."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: config.get(f"{k}_token_id") for k in ("bos", "eos")} if isinstance(config, dict) else {}


def _in_range(token_id, n_vocab: int) -> int | None:
    return token_id if isinstance(token_id, int) and 0 <= token_id < n_vocab else None


class IdTokenizer:
    """For a model with no usable tokenizer: text is typed as token ids ("15 496 11") and tokens
    are shown as ids ("#15"), so every view still works and nothing pretends to be words.
    `reason` says why there is no real tokenizer; `wants` names the file that would give one
    (TokenizerChoice.wants: "meta.pkl" for a nanoGPT char model), so the app can ask for it."""

    eot_token = None
    bos_token = None
    eos_token = None

    def __init__(self, n_vocab: int, reason: str, wants: str = ""):
        self.n_vocab = int(n_vocab)
        self.reason = reason
        self.wants = wants

    def encode(self, text: str, **_kwargs) -> list[int]:
        ids = []
        for word in text.replace(",", " ").split():
            try:
                value = int(word.lstrip("#"))
            except ValueError:
                raise ValueError(f"this model has no tokenizer ({self.reason}), so a prompt is token ids: "
                                 f"type numbers separated by spaces, e.g. '15 496 11', not {word!r}") from None
            if not 0 <= value < self.n_vocab:
                raise ValueError(f"token id {value:,} is outside this model's vocabulary (0..{self.n_vocab - 1:,}); "
                                 f"type ids below {self.n_vocab:,}")
            ids.append(value)
        return ids

    def token_str(self, token: int) -> str:
        return f"#{int(token)}"

    def token_bytes(self, token: int) -> bytes:
        return f"#{int(token)} ".encode()

    def decode(self, tokens, errors: str = "replace") -> str:
        return "".join(f"#{int(t)} " for t in tokens)  # spaced, so streamed ids stay apart
