"""Getting a model for the session: reading one (anything gptcore.load takes), drawing a fresh one
from a config, the app's default (GPT-2 small, or its shape untrained), a tiny one for tests, and
the ModelInfo the status bar shows. No Qt here.

Why beside the core: these are the slow halves of a model swap (reading, allocating, drawing
weights), done *outside* the core's lock; the core keeps only the swap itself
(`Session.load` / `build` / `adopt` hand the model made here to its `_swap`), so it stays small.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from gptcore.model.config import GPT2_VOCAB, GPTConfig

from explorer.runtime.devices import check_fits  # noqa: F401 - looked up here at call time (tests replace it)
from explorer.session.results import ModelInfo

ProgressFn = Callable[[int, int, str], None]

DEFAULT_SOURCE = "gpt2"
BUILD_STEPS = 1000  # 1% allocating, 98% drawing (by parameters, module by module), 1% swapping in
UNTRAINED_HOW_TO = (
    "Load real weights with File → Load GPT-2 small… (needs the network once; it is cached "
    "afterwards), File → Open checkpoint… (a Hugging Face folder, a .safetensors file or a "
    "nanoGPT ckpt.pt), or start with `gpt-explorer --model PATH`."
)


def model_info(model, *, name: str, trained: bool | None, source: str, note: str = "", provenance: str = "",
               tokenizer: str = "GPT-2 (offline BPE)") -> ModelInfo:
    """`trained` None: weights of unknown provenance, shown as "loaded" (never guessed trained)."""
    unique = list(model.parameters())  # a tied head is one Parameter, listed once
    return ModelInfo(
        name=name,
        trained=bool(trained),
        status={True: "trained", False: "untrained"}.get(trained, "loaded"),
        provenance=provenance,
        tokenizer=tokenizer,
        source=source,
        config=model.config.to_dict(),
        device=str(model.device),
        dtype=str(model.dtype).replace("torch.", ""),
        n_params=sum(p.numel() for p in unique),
        memory_bytes=sum(p.numel() * p.element_size() for p in unique),
        tied=model.config.tie_weights,
        note=note,
    )


def read(source, device, *, progress: ProgressFn | None = None, cancel=None, n_head: int | None = None,
         meta=None):
    """(model, info, tokenizer) read from `source` onto `device`; the app never guesses a head count
    (a file that does not record it needs `n_head`, else HeadCountNeeded). `meta`: the nanoGPT
    meta.pkl the user chose; without one, a char model whose meta.pkl was not found gets an
    IdTokenizer whose `wants` names it (the window then asks)."""
    from gptcore.io.folder_tokenizer import IdTokenizer
    from gptcore.io.loading import load, load_tokenizer

    model, load_info = load(str(source), device=str(device), progress=progress, cancel=cancel, n_head=n_head,
                            guess_heads=False, meta=meta)
    name = getattr(load_info, "name", None) or str(source)
    tokenizer, reason = load_tokenizer(load_info)
    if tokenizer is None:
        tokenizer = IdTokenizer(model.config.vocab_size, reason, wants=load_info.tokenizer.wants)
    info = model_info(model, name=name, trained=load_info.trained, provenance=load_info.provenance,
                      source=str(getattr(load_info, "path", source) or source),
                      tokenizer=load_info.tokenizer.describe())
    if load_info.heads == "given":
        info = dataclasses.replace(info, heads_note=(
            f"{model.config.n_head} heads, given by the user: the file does not record its head count"))
    return model, info, tokenizer


def fresh(config, init_scheme: str, seed: int | None, device, *, progress: ProgressFn | None = None,
          name: str | None = None, note: str = "", cancel=None):
    """(model, info): an untrained model from a config dict, refused before allocating if it won't
    fit. Reports progress up to 99% of BUILD_STEPS; the swap is the last percent."""
    from gptcore.io.loading import LoadCancelled
    from gptcore.model.gpt import GPT
    from gptcore.model.init import INIT_SCHEMES, InitCancelled, init_weights

    cfg = config if isinstance(config, GPTConfig) else GPTConfig.from_dict(dict(config))
    if init_scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init scheme {init_scheme!r}; choose one of {', '.join(INIT_SCHEMES)}")
    check_fits(cfg, device)
    report = progress or (lambda *_: None)
    report(0, BUILD_STEPS, "allocating weights")
    model = GPT.empty(cfg, device=device)  # allocated, nothing drawn twice

    def drawing(done: int, total: int, message: str) -> None:
        report(10 + (980 * done) // max(total, 1), BUILD_STEPS, message)

    try:
        init_weights(model, init_scheme, seed=seed, progress=drawing, cancel=cancel)
    except InitCancelled:
        raise LoadCancelled("build cancelled or superseded by a newer model request; the current model is "
                            "unchanged") from None
    report(990, BUILD_STEPS, "ready")
    info = model_info(model, name=name or f"custom ({cfg.n_layer}L × {cfg.n_embd}, {init_scheme} init)",
                      trained=False, source=f"built: {init_scheme} init, seed {seed}", note=note)
    return model, info


def load_default(session, progress: ProgressFn | None = None, cancel=None) -> ModelInfo:
    """GPT-2 small into `session` when it is in the local cache; otherwise the same shape with the
    gpt2 init, labelled untrained with how to get real weights. Never touches the network and
    never raises for missing weights, so the app always opens (and opens fast); the window offers
    the download separately, in the background."""
    from gptcore.io.hub import is_hub_cached

    if not is_hub_cached(DEFAULT_SOURCE):
        reason = "is not in the local Hugging Face cache"
    else:
        try:
            return session.load(DEFAULT_SOURCE, progress=progress, cancel=cancel)
        except Exception as exc:  # noqa: BLE001 - any reason (cancelled, corrupt cache) -> fallback
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            reason = f"could not be loaded from the cache ({first})"
    note = f"UNTRAINED — random weights (gpt2 init), not GPT-2's: GPT-2 small {reason}. {UNTRAINED_HOW_TO}"
    return session.build(GPTConfig.preset("gpt2").to_dict(), "gpt2", seed=0, progress=progress,
                         name="GPT-2 small shape, random init", note=note, cancel=cancel)


def tokenizer_vocab(session) -> int:
    """Ids the session's tokenizer can produce, without building GPT-2's (0.7 s) when it is that one
    (the core makes GPT-2's on first use: until then `_tokenizer` is None)."""
    tok = session._tokenizer  # noqa: SLF001 - the core's lazy slot, read without filling it
    return GPT2_VOCAB if tok is None else int(tok.n_vocab)


def tiny(seed: int = 0, **config_overrides):
    """(model, info): a small random model on the CPU for tests: 2 layers, 4 heads, 64 wide, GPT-2 vocab."""
    from gptcore.model.gpt import GPT

    values = dict(n_layer=2, n_head=4, n_embd=64, block_size=128)
    values.update(config_overrides)
    model = GPT(GPTConfig(**values), init="gpt2", seed=seed).eval()
    return model, model_info(model, name="tiny (test)", trained=False, source="Session.tiny")
