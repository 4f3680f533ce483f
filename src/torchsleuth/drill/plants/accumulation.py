"""Planted: a bfloat16 ``sum`` accumulates in bfloat16, not float32."""

from ..kernels import sum_accumulating_bfloat16_in_bfloat16
from ..override import planted

library = planted("sum.dim_IntList", sum_accumulating_bfloat16_in_bfloat16)  # lives as long as the worker
