"""Sparse autoencoders (issue 33): what a model represents, read as sparse features of one hook.

- dictionary — `SAE` (SAELens's TopK names and semantics) and `neuron_dictionary` (a layer's MLP
  neurons as an identity dictionary with the same interface);
- fit / topk_step — `fit_sae` on activation rows: the published TopK recipe, sparse hand-written
  gradients; sources — rows in memory or in an fp16 `ActivationCache` on disk;
- harvest — `train_sae` on a model: the hook's activations on token ids, then `fit_sae`;
- metrics — `sae_metrics` (L0, explained variance, dead latents, CE loss recovered);
- edit — `sae_edit`, clamp or ablate features with the SAE's error term kept;
- files — `save_sae` / `load_sae` in SAELens's on-disk layout, `check_sae_fits`.

Names are public at the package top (`gptcore.fit_sae`, ...); import them from there.
"""
