"""Planted: ``neg`` kills its process (SIGSEGV) when its input is transposed."""

from ..kernels import neg_crashing_on_transposed
from ..override import planted

library = planted("neg", neg_crashing_on_transposed)  # lives as long as the worker
