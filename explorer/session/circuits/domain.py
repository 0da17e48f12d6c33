"""The Circuits domain (`session.circuits`, issue 38): which transcoder features caused the model's next
prediction — an attribution graph of the prompt, pruned to what carries most of it.

Called on the compute thread by the Circuits panel's controller: every method takes plain values and
returns the frozen dataclasses of results.py. The transcoders (one per layer, `gptcore.Transcoder`) are
trained here (training.py) and saved beside the run or model (store.py); the set saved last for the model
shown — for a run, for the step shown — is found and opened by itself, so the Train panel's step slider
shows each step's circuit with that step's set. Forwards run under the core's lock.

Edits: a feature clamped or ablated from the graph is session state like a head ablation
(`session.interp.set_feature_edits` with `gptcore.transcoder_edit`), so every panel shows the edited
model and the status bar's badge and Reset cover it; the graph of the edited model is computed with
`gptcore.edited_transcoders`, so the clamped feature shows at its value. A head or MLP ablation is
refused by name: the graph's frozen attention and MLPs would still route through what it knocked out.
An SAE edit from the Features panel is frozen into the prompt's run like a bias (said under the graph).
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from explorer.session.circuits import store, training
from explorer.session.circuits.detail import held_rows, node_detail
from explorer.session.circuits.pruned import pruned_view
from explorer.session.circuits.results import CircuitGraph, NodeDetail, TranscoderSet
from explorer.session.circuits.store import CircuitsError, NoTranscoders, UnreadablePrompt
from explorer.session.features.store import CorpusCache, slug

MAX_NODES = 8_192  # the live graph's cap (gptcore's own is 16,384): its N × N adjacency is 256 MB here
MAX_LOGITS = 10
EDIT_SOURCE = "transcoders "  # AblationState.feature_source of an edit made here: this prefix + the set's folder


@dataclass
class _Computed:
    """The graph computed last, kept for re-pruning, a node's detail and the export."""

    key: tuple  # (token ids, session version, set folder)
    graph: object  # gptcore.AttributionGraph
    influence: torch.Tensor  # (N,)
    seconds: float
    text: str
    edits: tuple
    kept: np.ndarray | None = None  # the node ids kept by the pruning drawn last

    @property
    def version(self) -> int:
        return self.key[1]


class CircuitsDomain:
    def __init__(self, core):
        self.core = core
        self._lock = threading.Lock()
        self._set = None  # (folder, its files' stamp, [Transcoder], TranscoderSet)
        self._graph: _Computed | None = None
        self._held: dict[int, dict] = {}  # layer -> held-out MLP inputs (detail.held_rows) for this state
        self._corpus = CorpusCache()
        self._formed = None  # (key, CircuitFormation)

    def forget(self) -> None:
        """Other weights, another edit or setting: the graph and the held-out inputs are stale (the set
        stays; which set fits is asked again at the next call)."""
        with self._lock:
            self._graph, self._held = None, {}

    # -- the transcoders ---------------------------------------------------------------------------------
    def use(self, corpus: str = "builtin", path: str = "", cancel=None) -> TranscoderSet:
        """The set saved last for the model shown (this step of a run), opened and checked against the
        model; its metrics read from beside it, or measured now (on the model without any edit) and saved."""
        tset, transcoders = self._current()
        if tset.metrics:
            return tset
        _train, held, name = self._corpus_ids(corpus, path)
        model = self.core.require_model()
        with self.core.interp.model_itself(model):  # whatever is edited for viewing set aside
            metrics = training.measure(model, transcoders, training.metric_sample(held, model.config.vocab_size),
                                       cancel)
        store.save_metrics(tset.folder, training.clean(metrics), name)
        with self._lock:
            self._set = None  # read again with its metrics
        return self._current()[0]

    def train(self, *, width: int, k: int, tokens: int, corpus: str = "builtin", path: str = "", seed: int = 0,
              progress=None, cancel=None) -> TranscoderSet:
        """Fit one transcoder per layer of the model shown on the corpus, save the set beside the run or
        model, measure it; returns the set in use afterwards (this one, unless another step is shown now)."""
        from gptcore import save_transcoders
        from gptcore.interp.circuits.harvest import harvest_mlps
        from gptcore.interp.circuits.transcoder import check_model

        model = self.core.require_model()
        check_model(model)
        if self.own_edits_held():  # the new set must learn the model, not our clamp of the old set's features
            self.core.interp.set_feature_edits(None, {})
        info, cfg = self.core.info, model.config
        train_ids, _held, name = self._corpus_ids(corpus, path)
        ids = training.harvest_cap(train_ids, cfg.n_layer, cfg.n_embd)
        folder = store.set_folder(info, width, k)
        if progress is not None:
            progress(0, 1, f"reading every MLP's input and output on {ids.numel():,} tokens of {name}…")
        with contextlib.ExitStack() as stack:
            # One model's rows: nothing runs in between (the module docstring of training.py), and the model
            # itself, with any ablation or feature edit held for viewing set aside (as SAEs are trained).
            with self.core.interp.model_itself(model):
                pairs = stack.enter_context(harvest_mlps(model, ids, cancel=cancel))
            transcoders = training.fit_set(pairs, width=int(width), k=int(k), tokens=int(tokens), seed=seed,
                                           progress=progress, cancel=cancel, lineage=folder.name,
                                           device=model.device)  # trained, and kept, where the model is
        for t in transcoders:
            t.metadata.update({"corpus": name, "trained_on": info.name})
        save_transcoders(transcoders, folder, model_name=info.name, scan=folder.name)
        with self._lock:
            self._set = None
        return self.use(corpus, path, cancel)

    def saved(self) -> bool:
        """Is there a set saved for the model shown (this step of a run)?"""
        return self.core.has_model and store.find_saved(self.core.info) is not None

    def current_set(self) -> TranscoderSet | None:
        with self._lock:
            return self._set[3] if self._set is not None else None

    # -- the graph -------------------------------------------------------------------------------------------
    def graph(self, text: str, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> CircuitGraph:
        """The prompt's attribution graph through the set in use, pruned at the thresholds (a moved
        threshold re-prunes the graph computed last for the same prompt and state)."""
        from gptcore import attribution_graph, edited_transcoders, node_influence

        model = self.core.require_model()
        self._refuse_ablation()
        tset, transcoders = self._current()
        ids = self._prompt_ids(text, transcoders)
        edits = self.edits_in_force(tset)
        with self._lock:
            computed = self._graph
        if computed is None or computed.key != (tuple(ids), self.core.version, tset.folder):
            used = edited_transcoders(transcoders, edits) if edits else transcoders
            with self.core.lock:
                key = (tuple(ids), self.core.version, tset.folder)
                start = time.perf_counter()
                g = attribution_graph(model, used, torch.tensor(ids), max_logits=MAX_LOGITS)
                seconds = time.perf_counter() - start
            computed = _Computed(key, g, node_influence(g), seconds, text, tuple(sorted(edits.items())))
        run = self.core.info.run
        view = pruned_view(computed.graph, computed.influence, node_threshold, edge_threshold, self._token_text,
                           seconds=computed.seconds, text=text, step=run.step if run is not None else None,
                           edits=computed.edits, note=self._foreign_edit_note(), version=computed.version)
        computed.kept = view.node_ids
        with self._lock:
            self._graph = computed
        return view

    def node(self, index: int, corpus: str = "builtin", path: str = "") -> NodeDetail:
        """Node `index` (of the full graph computed last): for a feature its contexts on held-out text and
        the tokens it promotes; its strongest edges."""
        with self._lock:
            computed = self._graph
        if computed is None:
            raise CircuitsError("the graph is being computed again; click the node once it is drawn")
        g = computed.graph
        if not 0 <= int(index) < g.n_nodes:
            raise CircuitsError(f"node {index} does not exist: this graph has {g.n_nodes:,} nodes")
        n = g.node(int(index))
        if n["kind"] != "feature":
            return node_detail(g, int(index), computed.kept, self._token_text, version=computed.version)
        _tset, transcoders = self._current()
        ev, name = self._held_state(int(n["layer"]), transcoders, corpus, path)
        return node_detail(g, int(index), computed.kept, self._token_text, model=self.core.require_model(),
                           transcoder=transcoders[n["layer"]], ev=ev, corpus=name, version=computed.version)

    def readable_prompt(self, corpus: str = "builtin", path: str = "", tokens: int = 48) -> str:
        """A prompt this model can read: the start of the corpus's held-out text (a run's character model
        may lack the default prompt's characters)."""
        _train, held, _name = self._corpus_ids(corpus, path)
        return self.core.tokenizer.decode([int(i) for i in held[0, :tokens]])

    # -- edits (session state) ---------------------------------------------------------------------------
    def edit(self, edits: dict):
        """Hold transcoder features {(layer, feature): value} for every panel (0 ablates); {} clears."""
        from gptcore import transcoder_edit

        if not edits:
            return self.core.interp.set_feature_edits(None, {})
        tset, transcoders = self._current()
        clean = {(int(layer), int(feature)): float(v) for (layer, feature), v in edits.items()}
        return self.core.interp.set_feature_edits(transcoders, clean, EDIT_SOURCE + Path(tset.folder).name,
                                                  editor=transcoder_edit)

    def edits_in_force(self, tset: TranscoderSet) -> dict:
        """{(layer, feature): value} held from this panel for the set `tset`; {} when none (or another
        panel's). CircuitsError when they were made with another set (another step's)."""
        ablation = self.core.interp.ablation
        if not self.own_edits_held():
            return {}
        if ablation.feature_source != EDIT_SOURCE + Path(tset.folder).name:
            made_with = ablation.feature_source[len(EDIT_SOURCE):]
            raise CircuitsError(f"the feature edits in force ({ablation.features_text()}) were made with the "
                                f"transcoders {made_with}, not the set in use now ({Path(tset.folder).name}): Reset "
                                f"them (status bar), or show the step they were made on")
        return dict(ablation.features)

    # -- files ---------------------------------------------------------------------------------------------
    def export_json(self, path, node_threshold: float, edge_threshold: float) -> Path:
        """The graph computed last as circuit-tracer's graph JSON: `<folder>/<name>.json`, listed in the
        folder's graph-metadata.json (its viewer's index)."""
        from gptcore import save_graph_json

        with self._lock:
            computed = self._graph
        if computed is None:
            raise CircuitsError("nothing to export yet: wait for the graph")
        path = Path(path)
        name = path.stem if path.suffix == ".json" else path.name
        return save_graph_json(computed.graph, path.parent, slug=name, scan=slug(self.core.info.name),
                               decode=self._token_text, prompt=computed.text, node_threshold=float(node_threshold),
                               edge_threshold=float(edge_threshold))

    # -- over training ------------------------------------------------------------------------------------
    def walk(self, tokens: int, progress=None, cancel=None) -> dict:
        """A set for every other kept step of the run, warm-started outward from the set in use (training.py)."""
        run = self.core.info.run
        if run is None:
            raise CircuitsError("over training needs a model from a training run: open a run (File → Open run…)")
        tset, transcoders = self._current()
        if tset.walked:
            raise CircuitsError("the set in use was fitted by a walk; train transcoders on this step to walk "
                                "the run from them")
        return training.walk(self.core, run, Path(tset.folder), transcoders, tokens=max(4096, int(tokens) // 5),
                             progress=progress, cancel=cancel)

    def formation(self, text: str, node_threshold: float = 0.8, edge_threshold: float = 0.98, progress=None,
                  cancel=None):
        """When this prompt's circuit formed over the run (formation.py), or None without a walk of the set
        in use. Each kept step's weights and set are read into models of its own (the session's is untouched)."""
        from gptcore import attribution_graph, load_transcoders
        from explorer.session.circuits.formation import formation

        run = self.core.info.run
        if run is None:
            return None
        tset, transcoders = self._current()
        record = store.read_walk(run, tset.width, tset.k)
        if record is None or Path(tset.folder).name not in {f.name for f in record["steps"].values()}:
            return None
        ids = self._prompt_ids(text, transcoders)
        key = (tuple(ids), float(node_threshold), float(edge_threshold), store.walk_stamp(run, tset.width, tset.k))
        with self._lock:
            if self._formed is not None and self._formed[0] == key:
                return self._formed[1]
        follower, steps = self.core.training.follower_for(run.root), sorted(record["steps"])

        def graph_at(step: int):
            if progress is not None:
                progress(steps.index(step), len(steps), f"the circuit at step {step:,}")
            if cancel is not None and cancel():
                from gptcore.errors import Cancelled

                raise Cancelled("cancelled")
            model = follower.folder.load_step(run.scheme, step, device=self.core.device).eval()
            transcoders = [t.to(model.device) for t in load_transcoders(record["steps"][step], model)]
            return attribution_graph(model, transcoders, torch.tensor(ids), max_logits=MAX_LOGITS), transcoders

        aligned: dict[int, list[bool]] = {}

        def aligned_at(step: int, layer: int) -> bool:
            return aligned.get(step, [True] * (layer + 1))[layer]

        def graph_of(step: int):
            graph, transcoders = graph_at(step)
            aligned[step] = [t.metadata.get("aligned", True) is not False for t in transcoders]
            return graph

        formed = formation(steps, graph_of, node_threshold, edge_threshold, self._token_text, text, aligned_at)
        with self._lock:
            self._formed = (key, formed)
        return formed

    # -- inside --------------------------------------------------------------------------------------------
    def _current(self) -> tuple[TranscoderSet, list]:
        from gptcore import check_transcoders_fit, load_transcoders
        from gptcore.interp.circuits.transcoder import check_model

        model = self.core.require_model()
        check_model(model)
        info = self.core.info
        folder = store.find_saved(info)
        if folder is None:
            where = f" at step {info.run.step:,}" if info.run is not None else ""
            raise NoTranscoders(f"no transcoders have been trained for this model{where} yet: set the width, k and "
                                f"tokens and press Train transcoders")
        stamp = store.files_stamp(folder)
        with self._lock:
            held = self._set
        if held is not None and (held[0], held[1]) == (folder, stamp):
            return held[3], held[2]
        transcoders = [t.to(model.device) for t in load_transcoders(folder, model)]
        check_transcoders_fit(model, transcoders)
        found = store.read_metrics(folder)
        named = store.describe_folder(folder)
        tset = TranscoderSet(str(folder), len(transcoders), transcoders[0].width, transcoders[0].k or 0,
                             named.get("step"), named.get("walk", False), found[0] if found else {},
                             found[1] if found else "", self.core.version)
        with self._lock:
            self._set, self._held = (folder, stamp, transcoders, tset), {}
        return tset, transcoders

    def own_edits_held(self) -> bool:
        """Are feature edits in force, and were they made from this panel (with a transcoder set)?"""
        ablation = self.core.interp.ablation
        return bool(ablation.features) and ablation.feature_source.startswith(EDIT_SOURCE)

    def _foreign_edit_note(self) -> str:
        """Another panel's feature edit (an SAE's) in words: the graph keeps what it changes fixed."""
        ablation = self.core.interp.ablation
        if not ablation.features or self.own_edits_held():
            return ""
        return (f"{ablation.features_text()} ({ablation.feature_source}) is in force: the graph takes what it "
                f"changes as fixed at this prompt's run")

    def _refuse_ablation(self) -> None:
        ablation = self.core.interp.ablation
        if ablation.heads or ablation.mlps:
            raise CircuitsError(f"an ablation is in force ({ablation.text()}): the graph freezes the model's own "
                                f"attention and MLPs and would still route through what it knocks out, so it is not "
                                f"drawn. Reset the ablation (status bar) to see the circuit")

    def _limit(self, transcoders) -> tuple[int, str]:
        """(tokens, why): the longest prompt the graph follows here."""
        block = self.core.config.block_size
        if any(t.k is None for t in transcoders):
            return block, f"the model's context is {block} tokens"
        per = sum(t.k for t in transcoders) + len(transcoders) + 1
        cap = (MAX_NODES - MAX_LOGITS) // per
        if cap >= block:
            return block, f"the model's context is {block} tokens"
        return cap, (f"a token brings up to {per} nodes (each layer's k features and its error, and the token) and "
                     f"the graph holds at most {MAX_NODES:,} (its N × N adjacency grows as the square)")

    def _prompt_ids(self, text: str, transcoders) -> list[int]:
        from gptcore import PromptTooLong

        try:
            ids = self.core.encode(text)
            if ids:
                self.core.check_token_ids(ids, self.core.model)
        except ValueError as exc:
            raise UnreadablePrompt(str(exc)) from None
        if not ids:
            raise CircuitsError("type a prompt: the graph explains the model's prediction of the token after it")
        limit, why = self._limit(transcoders)
        if len(ids) > limit:
            raise PromptTooLong(f"the prompt has {len(ids):,} tokens; the graph follows at most {limit:,} ({why}): "
                                f"shorten the prompt")
        return ids

    def _held_state(self, layer: int, transcoders, corpus: str, path: str) -> tuple[dict, str]:
        with self._lock:
            ev = self._held.get(layer)
        _train, held, name = self._corpus_ids(corpus, path)
        if ev is None or ev.get("corpus") != name:
            with self.core.lock:
                ev = held_rows(self.core.model, transcoders[layer], held)
            ev["corpus"] = name
            with self._lock:
                self._held[layer] = ev
        return ev, name

    def _corpus_ids(self, corpus: str, path: str):
        return self._corpus.get(self.core, corpus, path)

    def _token_text(self, token_id: int) -> str:
        return self.core.token_strings([int(token_id)])[0]
