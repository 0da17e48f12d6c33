"""The features domain: feature dictionaries (neurons, SAEs) browsed, trained, stored and edited."""
