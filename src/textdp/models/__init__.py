"""Shared model primitives: a small causal LM with explicit key/value tensors
(:mod:`textdp.models.causal_lm`) and a BERT-family text classifier wrapper
(:mod:`textdp.models.classifier`). Import the submodules directly; they need
the ``nlp`` extra (torch, transformers)."""
