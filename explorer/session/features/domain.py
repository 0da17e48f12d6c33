"""The Features domain (`session.features`, issue 33): what the model represents, read through a
dictionary — a layer's MLP neurons (no training: useful the moment a model is open) or a sparse
autoencoder trained here on one site of one layer, saved beside the model or run and reopened.

Called on the compute thread by the Features panel's controller: every method takes plain values and
returns the frozen dataclasses of results.py. Forwards run under the core's lock; fitting an
SAE runs outside it, so a generation streaming behind another tab keeps going. Feature edits (clamp,
ablate) are session state like head ablation: `session.interp.set_feature_edits` installs them for
every panel and announces the change. The corpus: the built-in text (CPython's pydoc topics), the
run's own data (for a model from a training run), or a text file; its last tenth is held out for the
statistics and metrics.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from explorer.session.features import stats
from explorer.session.features.results import FeatureDetail, FeatureSource, FeatureTable, PromptFeatures
from explorer.session.features.store import (FeaturesError, corpus_ids, find_saved, hook_for, latest_saved,
                                             sae_folder)

EVAL_BYTES = 64 << 20  # held-out activations kept for the browser (float32)
HARVEST_BYTES = 256 << 20  # activations an SAE is fitted on (float32, in memory)
METRIC_LOGITS = 1 << 25  # tokens × vocabulary the SAE metrics' three forwards may cost (GPT-2: ~650 tokens)
TOP_PER_TOKEN = 6


class FeaturesDomain:
    def __init__(self, core):
        self.core = core
        self._lock = threading.Lock()
        self._dictionary = None
        self._source: FeatureSource | None = None
        self._eval = None  # dict(rows (N, d), ids (N,), seq_len, corpus, acts of the last detail)
        self._table: FeatureTable | None = None
        self._corpus: tuple | None = None  # (key, (train, held, name)): encoding a corpus takes seconds
        self._over = None  # FeaturesOverTraining of the run shown, once walked

    def forget(self) -> None:
        """Other weights or another ablation: the held-out activations and statistics are stale (the
        dictionary stays; it is checked against the model when next used)."""
        with self._lock:
            self._eval, self._table = None, None

    @property
    def source(self) -> FeatureSource | None:
        return self._source

    # -- choosing a dictionary ----------------------------------------------------------------------
    def use(self, kind: str, layer: int, site: str, *, corpus: str = "builtin", path: str = "",
            cancel=None) -> FeatureTable:
        """The feature table of `kind` ("neurons", or the SAE saved for this layer and site)."""
        from gptcore import check_sae_fits, load_sae, neuron_dictionary

        model = self.core.require_model()
        self._check_layer(model, layer)
        if kind == "neurons":
            dictionary = neuron_dictionary(model, int(layer))
            source = FeatureSource("neurons", int(layer), "mlp", dictionary.hook, dictionary.width)
        elif kind == "sae":
            folder = find_saved(self.core.info, layer, site)
            if folder is None:
                raise FeaturesError(f"no SAE has been trained on layer {layer}'s {site} for this model yet: set the "
                                    f"width, k and tokens and press Train SAE (or choose Neurons)")
            dictionary = load_sae(folder).to(model.device)  # where the model is, as a freshly trained one
            check_sae_fits(model, dictionary)
            source = FeatureSource("sae", int(layer), site, dictionary.hook, dictionary.width, dictionary.k, str(folder))
        else:
            raise FeaturesError(f"kind must be 'neurons' or 'sae', got {kind!r}")
        return self._install(dictionary, source, corpus, path, cancel)

    def train(self, layer: int, site: str, *, width: int, k: int, tokens: int, corpus: str = "builtin",
              path: str = "", seed: int = 0, progress=None, cancel=None) -> FeatureTable:
        """Fit an SAE on this layer and site (harvest under the lock, fitting outside it), save it beside
        the model or run, and return its table with its metrics on held-out text."""
        from gptcore import fit_sae, save_sae

        model = self.core.require_model()
        self._check_layer(model, layer)
        hook = hook_for("sae", layer, site)
        train_ids, _held, name = self._corpus_ids(corpus, path)
        d = model.config.n_embd
        with self.core.lock:
            rows = stats.hook_rows(model, _cap(train_ids, HARVEST_BYTES // (4 * d)), hook, cancel)  # (N, d)
        if progress is not None:
            progress(0, tokens, f"fitting on {rows.shape[0]:,} tokens of {name}")
        sae = fit_sae(rows, width=int(width), k=int(k), tokens=int(tokens), seed=seed, progress=progress,
                      cancel=cancel, hook=hook, device=model.device)  # trained, and kept, where the model is
        del rows
        folder = sae_folder(self.core.info, layer, site, int(width), int(k))
        save_sae(sae, folder, model_name=self.core.info.name)
        source = FeatureSource("sae", int(layer), site, hook, sae.width, sae.k, str(folder))
        return self._install(sae, source, corpus, path, cancel, with_metrics=True)

    def saved(self) -> tuple[int, str] | None:
        """(layer, site) of the SAE saved last for the model shown (reopened by the panel), or None."""
        return latest_saved(self.core.info) if self.core.has_model else None

    def over_training(self, layer: int, site: str, *, width: int, k: int, tokens: int, progress=None, cancel=None):
        """One SAE per kept step of the model's run, aligned by warm starts (training.py);
        `tokens` for the last step's fit, a fifth of it for each step walked back from it."""
        from explorer.session.features.training import over_training

        over = over_training(self.core, int(layer), site, width=int(width), k=int(k), tokens=max(4096, tokens // 5),
                             first_tokens=int(tokens), progress=progress, cancel=cancel)
        with self._lock:
            self._over = over
        return over

    def over_training_of(self, layer: int, site: str):
        """The kept over-training walk for this layer and site of the run shown, or None."""
        with self._lock:
            over = self._over
        return over if over is not None and (over.layer, over.site) == (int(layer), site) else None

    # -- what the browser shows ---------------------------------------------------------------------
    def table(self) -> FeatureTable | None:
        return self._table

    def detail(self, feature: int) -> FeatureDetail:
        model, (dictionary, ev, table) = self.core.require_model(), self._current()
        feature = self._check_feature(feature)
        acts = stats.dense_acts(dictionary, ev["rows"])[:, feature].numpy()  # (N,)
        order = np.argsort(-acts)[: stats.CONTEXTS]
        decode = self.core.token_strings
        contexts = tuple(stats.context_of(ev["ids"], ev["seq_len"], int(r), acts, decode) for r in order if acts[r] > 0)
        edges, counts = stats.histogram(acts)
        logits = stats.logit_rows(model, stats.write_directions(model, dictionary, table.source.kind,
                                                                 table.source.layer, [feature]))[0]
        vocab = min(model.config.vocab_size, len(logits))
        shown = min(8, vocab)  # a character model may have fewer tokens than that
        up, down = logits[:vocab].topk(shown), (-logits[:vocab]).topk(shown)
        promoted = tuple((decode([int(i)])[0], float(v)) for v, i in zip(up.values, up.indices))
        suppressed = tuple((decode([int(i)])[0], float(-v)) for v, i in zip(down.values, down.indices))
        what = "neuron" if table.source.kind == "neurons" else "feature"
        title = (f"{what} {feature} · active on {table.density[feature]:.2%} of {table.tokens:,} tokens · "
                 f"max {table.max_act[feature]:.3g}")
        return FeatureDetail(feature, title, contexts, edges, counts, float(table.density[feature]),
                             float(table.max_act[feature]), promoted, suppressed, self.core.version)

    def prompt(self, text: str, feature: int | None = None) -> PromptFeatures:
        """Which features fire on each token of `text` (the selected one's activation per token)."""
        model, dictionary = self.core.require_model(), self._current()[0]
        ids = self.core.encode(text)[-model.config.block_size:]
        if not ids:
            raise FeaturesError("type a prompt to see which features fire on its tokens")
        self.core.check_token_ids(ids, model)
        with self.core.lock:
            rows = stats.hook_rows(model, torch.tensor([ids]), dictionary.hook)  # (T, d)
            version = self.core.version
        acts = stats.dense_acts(dictionary, rows)  # (T, width)
        top = acts.topk(min(TOP_PER_TOKEN, acts.shape[1]), dim=1)
        selected = None if feature is None else self._check_feature(feature)
        return PromptFeatures(text, tuple(self.core.token_strings(ids)), selected,
                              None if selected is None else acts[:, selected].numpy(), top.indices.numpy(),
                              top.values.numpy(), version)

    def readable_prompt(self) -> str:
        """A prompt this model can read: the start of the corpus's held-out text (for a run's character
        model, whose alphabet may lack the default prompt's characters)."""
        ev = self._current()[1]
        return self.core.tokenizer.decode([int(i) for i in ev["ids"][: min(64, ev["seq_len"])]])

    def edit(self, edits: dict[int, float]):
        """Clamp (or with 0, ablate) features for every panel; {} clears. Announced as an ablation change."""
        dictionary = self._current(need_eval=False)[0]
        return self.core.interp.set_feature_edits(dictionary, {self._check_feature(f): float(v)
                                                               for f, v in edits.items()},
                                                  self._source.describe())

    # -- inside --------------------------------------------------------------------------------------
    def _install(self, dictionary, source, corpus, path, cancel, with_metrics=False) -> FeatureTable:
        model = self.core.require_model()
        _train, held, name = self._corpus_ids(corpus, path)
        held = _cap(held, EVAL_BYTES // (4 * max(dictionary.d_in, dictionary.width)))
        with self.core.lock:
            rows = stats.hook_rows(model, held, dictionary.hook, cancel)  # (N, d)
            version = self.core.version
        summary = stats.statistics(dictionary, rows, cancel)
        directions = stats.write_directions(model, dictionary, source.kind, source.layer)
        effects = stats.logit_effects(model, directions, model.config.vocab_size, cancel)
        flat = held.reshape(-1).numpy()
        labels = tuple(self.core.token_strings([int(flat[r])])[0] if v > 0 else ""
                       for r, v in zip(summary["best_rows"][0], summary["best_vals"][0]))
        metrics = {}
        if with_metrics:
            from gptcore import sae_metrics

            sample = _cap(held, METRIC_LOGITS // model.config.vocab_size)
            with self.core.lock:
                m = sae_metrics(model, dictionary, sample)
            metrics = {key: float(m[key]) for key in m.keys()}
        table = FeatureTable(source, np.arange(dictionary.width), summary["density"], summary["max_act"], effects,
                             labels, int(rows.shape[0]), name, metrics, version)
        with self._lock:
            self._dictionary, self._source, self._table = dictionary, source, table
            self._eval = {"rows": rows, "ids": flat, "seq_len": held.shape[1], "corpus": name}
        return table

    def _corpus_ids(self, corpus: str, path: str):
        """corpus_ids, kept for the model and tokenizer it was encoded for."""
        key = (corpus, path, id(self.core.model), id(self.core.tokenizer))
        with self._lock:
            if self._corpus is not None and self._corpus[0] == key:
                return self._corpus[1]
        found = corpus_ids(self.core, corpus, path)
        with self._lock:
            self._corpus = (key, found)
        return found

    def _current(self, need_eval: bool = True):
        with self._lock:
            dictionary, ev, table = self._dictionary, self._eval, self._table
        if dictionary is None:
            raise FeaturesError("choose Neurons or an SAE first")
        if need_eval and (ev is None or table is None):
            raise FeaturesError("the features are being measured again for the current model; wait for the table")
        return dictionary, ev, table

    def _check_feature(self, feature) -> int:
        width = self._dictionary.width
        if isinstance(feature, bool) or not isinstance(feature, (int, np.integer)) or not 0 <= int(feature) < width:
            raise FeaturesError(f"feature {feature!r} does not exist: this dictionary has features 0..{width - 1}")
        return int(feature)

    @staticmethod
    def _check_layer(model, layer) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < model.config.n_layer:
            raise FeaturesError(f"layer {layer!r} does not exist: this model has layers 0..{model.config.n_layer - 1}")


def _cap(ids: torch.Tensor, max_tokens: int) -> torch.Tensor:
    """The first sequences of `ids` (S, T) holding at most `max_tokens` tokens (at least one sequence)."""
    keep = max(1, int(max_tokens) // max(1, ids.shape[1]))
    return ids[:keep]

