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

What an SAE is trained on and measured against is the model itself, whatever edit is held for
viewing (a head or MLP ablated in Attribution, a feature clamped here): `session.interp.model_itself()`
sets those aside for the harvest and the metrics (issue 39). The metrics are measured once and saved
beside the SAE (store.py), so they come back with it whenever it is shown; the feature table itself
is measured on the model as every panel shows it (edits included).
"""
from __future__ import annotations

import threading
import uuid

import numpy as np
import torch

from explorer.session.features import stats
from explorer.session.features.dashboard import BEFORE, AFTER, MAX_CONTEXT, feature_column, feature_dashboard
from explorer.session.features.results import (FeatureDashboard, FeatureDetail, FeatureSource, FeatureTable,
                                               PromptFeatures)
from explorer.session.features.store import (CorpusCache, FeaturesError, find_saved, first_sequences, held_sample,
                                             hook_for, latest_saved, model_label, read_metrics, sae_folder,
                                             save_metrics)
from explorer.session.features.training import strongest_tokens

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
        self._corpus = CorpusCache()
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
            source = FeatureSource("neurons", int(layer), "mlp", dictionary.hook, dictionary.width,
                                   lineage=f"neurons of layer {int(layer)}")
        elif kind == "sae":
            folder = find_saved(self.core.info, layer, site)
            if folder is None:
                raise FeaturesError(f"no SAE has been trained on layer {layer}'s {site} for this model yet: set the "
                                    f"width, k and tokens and press Train SAE (or choose Neurons)")
            dictionary = load_sae(folder).to(model.device)  # where the model is, as a freshly trained one
            check_sae_fits(model, dictionary)
            source = FeatureSource("sae", int(layer), site, dictionary.hook, dictionary.width, dictionary.k, str(folder),
                                   lineage=dictionary.metadata.get("lineage") or str(folder))
        else:
            raise FeaturesError(f"kind must be 'neurons' or 'sae', got {kind!r}")
        return self._install(dictionary, source, corpus, path, cancel)

    def train(self, layer: int, site: str, *, width: int, k: int, tokens: int, corpus: str = "builtin",
              path: str = "", seed: int = 0, progress=None, cancel=None) -> FeatureTable:
        """Fit an SAE on this layer and site of the model itself (harvest under the lock with every edit
        set aside, fitting outside it), save it and its metrics beside the model or run (for the step
        shown when it started), and return its table."""
        from gptcore import fit_sae, save_sae

        model, info = self.core.require_model(), self.core.info
        self._check_layer(model, layer)
        hook = hook_for("sae", layer, site)
        train_ids, _held, name = self._corpus_ids(corpus, path)
        d = model.config.n_embd
        edits = self.core.interp.ablation.text()
        with self.core.interp.model_itself() as plain:  # no yield in here: a task run meanwhile would see the model unedited
            rows = stats.hook_rows(plain, first_sequences(train_ids, HARVEST_BYTES // (4 * d)), hook, cancel)  # (N, d)
        if progress is not None:
            unedited = f", read from the model itself ({edits} set aside)" if edits else ""
            progress(0, tokens, f"fitting on {rows.shape[0]:,} tokens of {name}{unedited}")
        sae = fit_sae(rows, width=int(width), k=int(k), tokens=int(tokens), seed=seed, progress=progress,
                      cancel=cancel, hook=hook, device=model.device)  # trained, and kept, where the model is
        del rows
        sae.metadata["lineage"] = uuid.uuid4().hex  # a new dictionary: feature i is no earlier feature i
        folder = sae_folder(info, layer, site, int(width), int(k))
        save_sae(sae, folder, model_name=model_label(info))
        if self.core.info.run != info.run or self.core.model is not model:
            raise FeaturesError(f"the SAE is saved in {folder}, but the model shown changed while it trained: "
                                f"choose SAE again to open the one saved for the model shown now")
        source = FeatureSource("sae", int(layer), site, hook, sae.width, sae.k, str(folder),
                               lineage=sae.metadata["lineage"])
        return self._install(sae, source, corpus, path, cancel)

    def saved(self) -> tuple[int, str] | None:
        """(layer, site) of the SAE saved last for the model shown (reopened by the panel), or None."""
        return latest_saved(self.core.info) if self.core.has_model else None

    def over_training(self, folder: str, *, tokens: int, progress=None, cancel=None):
        """From the SAE saved in `folder` (trained on the run's step shown, which it leaves as it is), one
        SAE per other kept step of the run, aligned by warm starts (training.py), `tokens` // 5 each."""
        from gptcore import load_sae

        from explorer.session.features.training import over_training

        run = self.core.info.run
        if run is None:
            raise FeaturesError("features over training need a model from a training run: open a run (File → "
                                "Open run…) and pick a step in the Train panel")
        anchor = load_sae(folder).to(self.core.device)
        layer, site = _layer_site(anchor.hook)
        over = over_training(self.core, run, layer, site, anchor, tokens=max(4096, int(tokens) // 5),
                             progress=progress, cancel=cancel)
        with self._lock:
            self._over = (run.root, run.scheme, over)
        return over

    def over_training_of(self, layer: int, site: str, width: int = 0, k: int = 0):
        """The walk over training kept for this layer and site (and width and k) of the run shown, or None."""
        run = self.core.info.run
        with self._lock:
            kept = self._over
        if kept is None or run is None or kept[:2] != (run.root, run.scheme):
            return None
        over = kept[2]
        fits = (over.layer, over.site) == (int(layer), site) and (not width or (over.width, over.k) == (width, k))
        return over if fits else None

    def saved_over_training(self, progress=None, cancel=None):
        """For the SAE shown (a run's step): the walk's series saved beside the run, or, when only the
        steps' SAEs are there, their series measured now (nothing fitted); None when fewer than two
        steps have one. Kept like a walk's, so the chart shows in a new session too."""
        from explorer.session.features.training import measure_saved, read_series

        source, run = self._source, self.core.info.run
        if source is None or source.kind != "sae" or run is None:
            return None
        lineage = source.lineage if source.lineage != source.folder else ""
        over = self.over_training_of(source.layer, source.site, source.width, source.k)
        if over is None:
            over = read_series(self.core, run, source.layer, source.site, source.width, source.k, lineage)
        if over is None:
            over = measure_saved(self.core, run, source.layer, source.site, source.width, source.k, lineage,
                                 progress=progress, cancel=cancel)
        if over is not None:
            with self._lock:
                self._over = (run.root, run.scheme, over)
        return over

    # -- what the browser shows ---------------------------------------------------------------------
    def table(self) -> FeatureTable | None:
        return self._table

    def detail(self, feature: int) -> FeatureDetail:
        model, (dictionary, ev, table) = self.core.require_model(), self._current()
        feature = self._check_feature(feature)
        acts = feature_column(dictionary, ev, feature)  # (N,)
        decode = self.core.token_strings
        contexts = stats.top_contexts(acts, ev, decode)
        edges, counts = stats.histogram(acts)
        direction = stats.write_directions(model, dictionary, table.source.kind, table.source.layer, [feature])
        promoted, suppressed = stats.promoted_suppressed(model, direction, decode)
        what = "neuron" if table.source.kind == "neurons" else "feature"
        title = (f"{what} {feature} · active on {table.density[feature]:.2%} of {table.tokens:,} tokens · "
                 f"max {table.max_act[feature]:.3g}")
        return FeatureDetail(feature, title, contexts, edges, counts, float(table.density[feature]),
                             float(table.max_act[feature]), promoted, suppressed, self.core.version)

    def dashboard(self, feature: int, before: int = BEFORE, after: int = AFTER) -> FeatureDashboard:
        """The feature's dashboard beyond its detail (dashboard.py): examples at several activation levels
        and at random with `before`/`after` tokens of context, its nearest features, its logits histogram."""
        model, (dictionary, ev, table) = self.core.require_model(), self._current()
        feature = self._check_feature(feature)
        for name, value in (("before", before), ("after", after)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_CONTEXT:
                raise FeaturesError(f"context {name} the token must be a whole number of tokens from 0 to "
                                    f"{MAX_CONTEXT}, got {value!r}")
        return feature_dashboard(model, dictionary, ev, table, feature, int(before), int(after),
                                 self.core.token_strings, self.core.version)

    def prompt(self, text: str, feature: int | None = None, lineage: str | None = None) -> PromptFeatures:
        """Which features fire on each token of `text` (the selected one's activation per token). A
        `feature` chosen in another dictionary than the one installed now (`lineage` differs: the panel
        asked before a new table reached it) shades nothing rather than failing."""
        model, dictionary = self.core.require_model(), self._current()[0]
        if lineage is not None and self._source is not None and lineage != self._source.lineage:
            feature = None
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
    def _install(self, dictionary, source, corpus, path, cancel) -> FeatureTable:
        model = self.core.require_model()
        _train, held, name = self._corpus_ids(corpus, path)
        held = held_sample(held, dictionary.d_in, dictionary.width)
        metrics, metrics_on = self._metrics(dictionary, source, held, name, cancel)
        with self.core.lock:
            rows = stats.hook_rows(model, held, dictionary.hook, cancel)  # (N, d)
            version = self.core.version
        summary = stats.statistics(dictionary, rows, cancel)
        directions = stats.write_directions(model, dictionary, source.kind, source.layer)
        effects = stats.logit_effects(model, directions, model.config.vocab_size, cancel)
        flat = held.reshape(-1).numpy()
        labels = strongest_tokens(self.core, flat, summary)
        table = FeatureTable(source, np.arange(dictionary.width), summary["density"], summary["max_act"], effects,
                             labels, int(rows.shape[0]), name, metrics=metrics, metrics_on=metrics_on, version=version)
        with self._lock:
            self._dictionary, self._source, self._table = dictionary, source, table
            self._eval = {"rows": rows, "ids": flat, "seq_len": held.shape[1], "corpus": name}
            if "topk" in summary:  # the rows' active latents, encoded once for the table and the dashboard
                self._eval["topk"] = (dictionary, *summary["topk"])
        return table

    def _metrics(self, dictionary, source, held, corpus: str, cancel) -> tuple[dict, str]:
        """An SAE's metrics: those saved beside it, else measured now on the model itself (every edit set
        aside) and saved there; neurons have none."""
        if source.kind != "sae":
            return {}, ""
        saved = read_metrics(source.folder)
        if saved is not None:
            return saved
        from gptcore import sae_metrics

        sample = first_sequences(held, METRIC_LOGITS // self.core.require_model().config.vocab_size)
        with self.core.interp.model_itself() as plain:
            measured = sae_metrics(plain, dictionary, sample, cancel=cancel)
        metrics = {key: float(measured[key]) for key in measured.keys()}
        on = f"{measured.tokens:,} held-out tokens of {corpus}, model unedited"
        save_metrics(source.folder, metrics, on)
        return metrics, on

    def _corpus_ids(self, corpus: str, path: str):
        return self._corpus.get(self.core, corpus, path)

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


def _layer_site(hook: str) -> tuple[int, str]:
    """(layer, site) of an SAE's hook point ("blocks.1.hook_resid_post" -> (1, "resid"))."""
    parts = hook.split(".")
    if len(parts) != 3 or parts[0] != "blocks" or parts[2] not in ("hook_resid_post", "hook_mlp_out"):
        raise FeaturesError(f"an SAE at {hook!r} is not one the Features panel trains (a layer's residual stream "
                            f"or MLP output)")
    return int(parts[1]), "resid" if parts[2] == "hook_resid_post" else "mlp"

