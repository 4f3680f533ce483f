"""Planted: functional ``neg`` writes its input."""

from ..kernels import neg_writing_its_input
from ..override import planted

library = planted("neg", neg_writing_its_input)  # lives as long as the worker
