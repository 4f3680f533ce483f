"""Planted: in-place ``addcmul_`` drops its write when ``self`` is not contiguous."""

from ..kernels import addcmul_dropping_noncontiguous_writes
from ..override import planted

library = planted("addcmul_", addcmul_dropping_noncontiguous_writes)  # lives as long as the worker
