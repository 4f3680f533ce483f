"""Planted hang: ``neg`` never returns when its input is transposed.

Loaded by each sweep worker through ``SweepConfig.imports``; the pool kills
the worker after the sweep's timeout.
"""

import time
import warnings

import torch


def _neg(self):
    while self.dim() == 2 and self.stride(0) < self.stride(1):  # transposed, and only that
        time.sleep(1)
    return self * -1


_lib = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
    _lib.impl("neg", _neg, "CPU")
