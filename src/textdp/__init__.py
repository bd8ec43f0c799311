"""textdp: differential privacy for text.

Layers (each imports only from the layers below it):

* ``textdp.cli`` -- the Typer command line; parsing, progress and printing only.
* capabilities -- ``sanitize``, ``topics``, ``audit``, ``bounds``, ``attacks``, ``evaluate``.
* shared primitives -- ``noise`` (secure samplers, generators), ``accounting``
  (guarantees, composition, budget ledger), ``mechanisms`` (registry of randomized
  releases), ``data`` (readers, writers, built-in datasets, tokenizers),
  ``embeddings``, ``models``; plus ``errors``.
"""

__version__ = "0.1.0"
