"""Planted: ``neg(out=)`` restrides ``out`` to contiguous strides instead of writing through its own."""

from ..kernels import neg_out_restriding_out
from ..override import planted

library = planted("neg.out", neg_out_restriding_out)  # lives as long as the worker
