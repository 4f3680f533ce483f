"""``--import FILE.py``: a kernel a file registers at its top level stays registered."""

from __future__ import annotations

import gc

import torch

from torchsleuth.run.imports import IMPORTED as _IMPORTED
from torchsleuth.run.imports import load_imports

PLANT = """
import warnings

import torch

from torchsleuth.drill.kernels import addcmul_dropping_noncontiguous_writes

library = torch.library.Library("aten", "IMPL")  # held by nothing but this file's globals
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("addcmul_", addcmul_dropping_noncontiguous_writes, "CPU")
"""


def test_a_library_held_only_by_an_imported_file_stays_alive(tmp_path):
    path = tmp_path / "plant.py"
    path.write_text(PLANT)
    load_imports((str(path),))
    try:
        gc.collect()
        self = torch.zeros(3, 2).t()  # not contiguous: the planted kernel drops the write
        self.addcmul_(torch.ones(2, 3), torch.ones(2, 3))
        assert bool((self == 0).all())
    finally:
        _IMPORTED.pop(str(path))["library"]._destroy()
    self = torch.zeros(3, 2).t()
    self.addcmul_(torch.ones(2, 3), torch.ones(2, 3))
    assert bool((self == 1).all())  # the real kernel again
