"""Duplex models: the adapter contract, a lazy registry and the baselines."""
