"""Attacks on text privacy: mechanism-aware inversion, mask-token inference and model inversion."""
