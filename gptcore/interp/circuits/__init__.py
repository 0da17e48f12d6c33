"""Circuits (issue 38): transcoders that replace a model's MLPs, and attribution graphs over their features.

- transcoder — `Transcoder` (circuit-tracer's per-layer semantics, TopK), the errors, and the checks
  that a model is supported and a set of transcoders fits it;
- fit / train_step — `fit_transcoder` on (input, target) rows: fit_sae's recipe, hand-written sparse
  gradients; harvest — `train_transcoders` on a model (every MLP read in one forward per chunk);
- metrics — `transcoder_metrics` (per-layer variance unexplained, CE loss recovered with every MLP replaced);
- frozen / graph / graph_result — `attribution_graph`: the frozen replacement model run backwards
  for all targets at once, an `AttributionGraph` of exact direct effects;
- prune — `prune_graph`, circuit-tracer's pruning; export — its frontend's graph JSON;
- files — `save_transcoders` / `load_transcoders` in circuit-tracer's per-layer safetensors layout;
- edit — `transcoder_edit` (clamp or ablate features in the model, as `sae_edit` does for an SAE) and
  `edited_transcoders` (the same edit as an attribution graph reads it).

Names are public at the package top (`gptcore.attribution_graph`, ...); import them from there.
"""
