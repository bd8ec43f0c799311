"""Data layer: readers/writers (``textdp.data.io``), built-in datasets
(``textdp.data.datasets``) and tokenizers (``textdp.data.tokenize``)."""

from textdp.data.datasets import Dataset, list_datasets, load_dataset

__all__ = ["Dataset", "list_datasets", "load_dataset"]
