"""The ops the OpInfo database lacks, described with the few attributes cases.opinfo reads.

The first seed story's random in-place ops include ``random_`` and
``bernoulli_``, which have no OpInfo entry of their own. The entries here
answer what cases.opinfo asks of an OpInfo entry, so the rest of the pipeline
cannot tell them apart from OpInfo's.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch


class ExtraOp:
    supports_out = False
    supports_autograd = False
    method_variant = None
    variant_test_name = ""
    decorators = ()

    def __init__(self, name, inplace, make_args, dtypes_):
        self.name = name
        self.inplace_variant = inplace
        self.op = lambda t, *args, **kwargs: inplace(t.clone(), *args, **kwargs)
        self._make_args = make_args
        self._dtypes = dtypes_

    def supported_dtypes(self, device_type):
        return set(self._dtypes)

    def supported_backward_dtypes(self, device_type):
        return set()

    def sample_inputs(self, device, dtype, requires_grad=False):
        from torch.testing import make_tensor

        for shape in ((10,), (5, 5), (4, 3, 5)):
            t = make_tensor(shape, dtype=dtype, device=device)
            for args, kwargs in self._make_args(dtype, t):
                yield SimpleNamespace(input=t, args=args, kwargs=kwargs)  # what cases.opinfo reads of a SampleInput


def _random_args(dtype, t):
    if dtype == torch.bool:
        yield (), {}
        return
    yield (), {}
    yield (3,), {}
    yield (-2, 7) if dtype not in (torch.uint8,) else (1, 7), {}


def _bernoulli_args(dtype, t):
    yield (0.5,), {}  # bernoulli_.float
    yield (), {"p": 0.25}
    # bernoulli_.Tensor, a kernel of its own: a probability per element, laid out as self is (a strided p is read too)
    yield (torch.linspace(0.1, 0.9, t.numel()).reshape(t.shape),), {}


def ops() -> tuple:
    ints = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    floats = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
    return (
        ExtraOp("random_", torch.Tensor.random_, _random_args, ints + floats + (torch.bool,)),
        ExtraOp("bernoulli_", torch.Tensor.bernoulli_, _bernoulli_args, floats + ints + (torch.bool,)),
    )
