"""The "why" science: attribution, interventions (ablation), patching, probes."""
