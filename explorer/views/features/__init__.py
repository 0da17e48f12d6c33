"""The Features panel: a dictionary of features (MLP neurons or an SAE) browsed, shaded on a prompt, edited."""
