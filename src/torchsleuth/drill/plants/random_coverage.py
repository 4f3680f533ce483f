"""Planted: ``uniform_`` fills only every other element of a non-contiguous ``self``."""

from ..kernels import uniform_skipping_noncontiguous_elements
from ..override import planted

library = planted("uniform_", uniform_skipping_noncontiguous_elements)  # lives as long as the worker
