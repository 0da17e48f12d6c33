"""The model: config, the GPT, hook points, init schemes, positions, parameter accounting."""
