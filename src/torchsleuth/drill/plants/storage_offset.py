"""Planted: ``sum`` reads from the start of the storage, ignoring the view's storage offset."""

from ..kernels import sum_ignoring_storage_offset
from ..override import planted

library = planted("sum.dim_IntList", sum_ignoring_storage_offset)  # lives as long as the worker
