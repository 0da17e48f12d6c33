"""Where the Features domain's inputs and outputs live (issue 33): the corpus it reads (as token ids
of this model's tokenizer, split into train and a held-out tenth) and the folders SAEs are saved in —
beside the run (a run's step: `<run>/sae/`), beside a local model (`<its folder>/sae/`), else in the
user's data folder — so a trained SAE is found again the next time the same model is open. No Qt.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from gptcore.errors import UserError

SEQ_LEN = 128  # tokens per sequence the corpus is cut into (or the model's block_size, if shorter)
HELD_OUT = 0.1  # the last tenth of the corpus: statistics and metrics, never trained on


class FeaturesError(UserError):
    """A features request that cannot be met as asked; the message says what to do."""


def hook_for(kind: str, layer: int, site: str) -> str:
    """The hook point a dictionary reads: a layer's MLP neurons, or an SAE's site."""
    if kind == "neurons":
        return f"blocks.{layer}.mlp.hook_post"
    if site not in ("resid", "mlp"):
        raise FeaturesError(f"site must be 'resid' (the residual stream after the block) or 'mlp' (the MLP "
                            f"output), got {site!r}")
    return f"blocks.{layer}.hook_resid_post" if site == "resid" else f"blocks.{layer}.hook_mlp_out"


class CorpusError(UserError):
    """The corpus cannot be read or encoded by this model; the message says which to choose instead."""


def corpus_ids(core, choice: str, path: str = "") -> tuple[torch.Tensor, torch.Tensor, str]:
    """(train (S, T), held-out (S', T), name) token ids of `choice`: "builtin", "run" or "file" (`path`)."""
    from gptcore.training.data import DataError, load_corpus, pydoc_topics_text, read_text_file

    model = core.require_model()
    if choice == "run":
        run = core.info.run
        if run is None:
            raise CorpusError("this model is not a training run's step, so it has no run data: choose the built-in "
                              "text or a file")
        meta = core.training.follower_for(run.root).meta or {}
        source = (meta.get("corpus") or {}).get("source")
        try:
            corpus = load_corpus(source, tokenizer=(meta.get("tokenizer") or {}).get("kind") or "char")
        except (DataError, OSError) as exc:
            raise CorpusError(f"the run's data cannot be read ({exc}); choose the built-in text or a file") from None
        ids, name = [int(i) for i in corpus.train] + [int(i) for i in corpus.val], f"the run's data ({corpus.name})"
    else:
        if choice == "file":
            if not path:
                raise CorpusError("choose a text file first (Browse…), or use the built-in text")
            try:
                text, name = read_text_file(Path(path).expanduser()), Path(path).name
            except (DataError, OSError) as exc:
                raise CorpusError(f"{path} cannot be read as text ({exc}); choose a UTF-8 text file") from None
        elif choice == "builtin":
            text, name = pydoc_topics_text(), "pydoc topics (built-in)"
        else:
            raise CorpusError(f"corpus must be 'builtin', 'run' or 'file', got {choice!r}")
        try:
            ids = core.encode(text)
        except ValueError as exc:
            raise CorpusError(f"{name} cannot be encoded by this model's tokenizer ({str(exc)[:200]}); choose the "
                              f"run's own data or a file in the model's alphabet") from None
    vocab = model.config.vocab_size
    if ids and max(ids) >= vocab:
        raise CorpusError(f"{name} has token ids past this model's vocabulary ({vocab:,}); choose a corpus this "
                          f"model can read")
    T = min(SEQ_LEN, model.config.block_size)
    n = len(ids) // T
    if n < 2:
        raise CorpusError(f"{name} is too short: {len(ids):,} tokens, fewer than two sequences of {T}; choose a "
                          f"longer text")
    seqs = torch.tensor(ids[: n * T], dtype=torch.long).view(n, T)  # (n, T)
    held = max(1, int(round(n * HELD_OUT)))
    return seqs[: n - held], seqs[n - held:], name


def sae_home(info) -> Path:
    """The folder this model's SAEs are saved in (see the module docstring)."""
    if info.run is not None:
        return Path(info.run.root) / "sae"
    source = Path(str(info.source)).expanduser() if info.source else None
    if source is not None and source.exists():
        return (source if source.is_dir() else source.parent) / "sae"
    from gptcore.io.user_dirs import user_dir

    return user_dir("data", "gpt-explorer") / "sae" / _slug(info.name)


def _step_prefix(info) -> str:
    """"gpt2-step001500-" for a run's step, "" for any other model."""
    run = info.run
    return f"{run.scheme}-step{run.step:06d}-" if run is not None else ""


def _prefix(info, layer: int, site: str) -> str:
    return f"{_step_prefix(info)}L{int(layer)}-{site}-"


def sae_folder(info, layer: int, site: str, width: int, k: int) -> Path:
    return sae_home(info) / f"{_prefix(info, layer, site)}w{width}-k{k}"


def find_saved(info, layer: int, site: str) -> Path | None:
    """The most recently saved SAE for this model (this step of a run), layer and site, if any."""
    home = sae_home(info)
    if not home.is_dir():
        return None
    prefix = _prefix(info, layer, site)
    found = [p for p in home.iterdir() if p.name.startswith(prefix) and (p / "cfg.json").is_file()]
    return max(found, key=lambda p: (p / "cfg.json").stat().st_mtime) if found else None


def latest_saved(info) -> tuple[int, str] | None:
    """(layer, site) of the SAE saved last for this model (this step of a run), if any: what the
    Features panel reopens when the model is opened again."""
    home = sae_home(info)
    if not home.is_dir():
        return None
    prefix = _step_prefix(info)
    found = [p for p in home.iterdir() if p.name.startswith(prefix) and (p / "cfg.json").is_file()]
    for folder in sorted(found, key=lambda p: (p / "cfg.json").stat().st_mtime, reverse=True):
        m = re.fullmatch(re.escape(prefix) + r"L(\d+)-(resid|mlp)-w\d+-k\d+", folder.name)
        if m:
            return int(m[1]), m[2]
    return None


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip("-")[:80] or "model"
