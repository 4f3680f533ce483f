"""Everything the judge may look at for one case, computed only when it looks.

The judge reads; it never calls an op. What it may need beyond the test call
itself (the references, the op names and schema-declared writes from a traced
rerun, a second run for random coverage, a probe under
``torch.use_deterministic_algorithms``) is computed here, on first access.
"""

from __future__ import annotations

import functools

import torch

from . import call, tree
from .facts import Facts
from .records import CallSpec
from .references import Reference, References
from .trace import Trace


class Evidence:
    def __init__(self, prepared: call.Prepared, ran: call.Ran, refs: References, facts: Facts, *, function_name: str,
                 second: call.Ran | None = None, prefill: tuple = (), compiled: bool = False):
        self.case = prepared.case
        self.prepared = prepared
        self.ran = ran
        self.refs = refs
        self.facts = facts  # from the contiguous reference's trace
        self.function_name = function_name
        # random fills: a second run with another prefill of self
        self.second = second
        self.prefill = prefill
        # ``ran`` is the call compiled (torch.compile): other kernels than eager's, so never compared with eager bit for
        # bit, and its draws are inductor's own (the compile oracle's variant cases)
        self.compiled = compiled

    def view_mask(self, path: str) -> torch.Tensor:
        """Which elements of the path's storage its view covers (before the call)."""
        shape, stride, offset = self.ran.meta[path]
        numel = self.ran.before[path].numel()
        mask = torch.zeros(numel, dtype=torch.bool)
        if numel and all(s > 0 for s in shape):
            mask[torch.arange(numel).as_strided(shape, stride, offset).reshape(-1)] = True
        return mask

    def before_view(self, path: str) -> torch.Tensor:
        """The path's values before the call, as a CPU tensor of its shape."""
        shape, stride, offset = self.ran.meta[path]
        return self.ran.before[path].cpu().as_strided(shape, stride, offset)

    @functools.cached_property
    def _traced(self) -> tuple[Trace, frozenset[str]]:
        return call.traced(self.prepared, call.rebuilt(self.ran, self.prepared))

    def written_by_schema(self, path: str) -> bool:
        """Whether an op's schema (or run.trace's declared list) says the call writes ``path``."""
        return path in self._traced[1]

    @functools.cached_property
    def op(self) -> str:
        """The aten overload a finding names: the call's own, or the forward op's for backward."""
        if self.case.variant == "backward":
            return self.facts.op
        return self._traced[0].primary() or self.facts.op

    def call_spec(self) -> CallSpec:
        return call.call_spec(self.prepared, self.ran, self.function_name)

    @functools.cached_property
    def nondeterministic(self) -> bool:
        """Whether two runs of the contiguous call on the same inputs differ."""
        try:
            return not _bits_agree(call.compute(self.refs.base, self.refs._copies()), call.compute(self.refs.base, self.refs._copies()))
        except Exception:
            return False

    @functools.cached_property
    def declared_nondeterministic(self) -> bool:
        """Whether PyTorch itself says this call may be nondeterministic.

        It says so in one of three ways: under ``torch.use_deterministic_algorithms``
        the call raises "does not have a deterministic implementation", or it
        switches to a deterministic algorithm and gives the same bits twice; or
        the call runs cuDNN convolutions, which PyTorch's reproducibility notes
        declare nondeterministic unless ``torch.backends.cudnn.deterministic``.
        Only meaningful once the call has been seen to be nondeterministic.
        """
        if self.case.device.startswith("cuda") and any("conv" in name for name in self.facts.names):
            return True
        previous = torch.are_deterministic_algorithms_enabled()
        previous_warn = torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True, warn_only=False)  # raising: a warning comes once per process
        try:
            first = call.compute(self.refs.base, self.refs._copies())
            second = call.compute(self.refs.base, self.refs._copies())
        except RuntimeError as e:
            return "deterministic" in str(e)
        except Exception:
            return False
        finally:
            torch.use_deterministic_algorithms(previous, warn_only=previous_warn)
        return _bits_agree(first, second)

    @functools.cached_property
    def same_layout(self) -> Reference:
        """The call again on fresh storages with the same contents and metadata (storage-defined ops)."""
        try:
            return Reference(value=call.compute(self.prepared, call.rebuilt(self.ran, self.prepared)))
        except Exception as e:
            return Reference(error=e)


def _bits_agree(first, second) -> bool:
    """Whether two results hold the same bits, leaf by leaf."""
    a, b = tree.output_leaves(first), tree.output_leaves(second)
    if len(a) != len(b):
        return False
    for (_, x), (_, y) in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(_bytes(x), _bytes(y)):
                return False
        elif x != y:
            return False
    return True


def _bytes(t: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.detach().reshape(-1))
    return flat.view(torch.uint8)
