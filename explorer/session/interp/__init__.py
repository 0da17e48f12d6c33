"""The interpretability domain: ablation, attribution, activation patching and the head census."""
