"""Everything the judge may look at for one case, computed only when it looks.

The judge reads; it never calls an op. What it may need beyond the test call
itself (the references, a second run for random coverage, a probe under
``torch.use_deterministic_algorithms``) is computed here, on first access.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

from . import call
from .facts import Facts
from .records import CallSpec
from .references import Reference, References


class Evidence:
    def __init__(self, prepared: call.Prepared, ran: call.Ran, refs: References, facts: Facts, *, function_name: str, second: call.Ran | None = None, prefill: tuple = ()):
        self.case = prepared.case
        self.prepared = prepared
        self.ran = ran
        self.refs = refs
        self.facts = facts
        self.function_name = function_name
        # random in-place ops: a second run with another prefill of self
        self.second = second
        self.prefill = prefill

    @property
    def device(self) -> str:
        return self.case.device

    def view_mask(self, path: str) -> torch.Tensor:
        """Which elements of the path's storage its view covers (before the call)."""
        shape, stride, offset = self.ran.meta[path]
        numel = self.ran.before[path].numel()
        mask = torch.zeros(numel, dtype=torch.bool)
        if all(s > 0 for s in shape):
            index = torch.arange(numel).as_strided(shape, stride, offset) if numel else torch.empty(0, dtype=torch.long)
            mask[index.reshape(-1)] = True
        return mask

    def before_view(self, path: str) -> torch.Tensor:
        """The path's values before the call, as a CPU tensor of its shape."""
        shape, stride, offset = self.ran.meta[path]
        return self.ran.before[path].cpu().as_strided(shape, stride, offset)

    def written_by_schema(self, path: str) -> bool:
        t = self.prepared.tensors[path]
        return self.ran.trace is not None and t.untyped_storage().data_ptr() in self.ran.trace.written

    def call_spec(self) -> CallSpec:
        return call.call_spec(self.prepared, self.ran, self.function_name)

    @functools.cached_property
    def known_nondeterministic(self) -> bool:
        """Whether PyTorch itself says this call has no deterministic implementation."""
        previous = torch.are_deterministic_algorithms_enabled()
        previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.use_deterministic_algorithms(True, warn_only=True)
            try:
                call.compute(self.refs.base)
            except Exception:
                pass
            finally:
                torch.use_deterministic_algorithms(previous, warn_only=previous_warn)
        return any("deterministic" in str(w.message) for w in caught)

    @functools.cached_property
    def same_layout(self) -> Reference:
        """The call again on fresh storages with the same contents and metadata (storage-defined ops)."""
        tensors = {}
        for path, t in self.prepared.tensors.items():
            shape, stride, offset = self.ran.meta[path]
            fresh = self.ran.before[path].clone().as_strided(shape, stride, offset)
            tensors[path] = fresh.requires_grad_(t.requires_grad) if fresh.is_floating_point() or fresh.is_complex() else fresh
        try:
            return Reference(value=call.compute(self.prepared, tensors))
        except Exception as e:
            return Reference(error=e)

    def result(self) -> Any:
        return self.ran.result
