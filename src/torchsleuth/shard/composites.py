"""The composite paths where ``_StridedShard`` arises in practice, as ops of their own.

Design note. The second seed story's bugs were in chains, not single ops:
a view, flatten or reshape of a tensor sharded on an inner dim (or placed
by FSDP2 over tensor parallelism) makes a ``_StridedShard`` placement, and
the op after it (sum, mean, softmax, layer_norm, transpose, slice, cat,
select, stack) had to keep or replicate it. Each chain here is one
"op" of the shard catalog, named ``composite.<chain>``, written as the
source of a function of one tensor so that a repro script carries the very
same code. Its samples are two seeded 3-D tensors, one whose dims divide
by every default mesh (even shards) and one whose do not (uneven).
"""

from __future__ import annotations

import functools
import hashlib

import torch

from ..cases.opinfo import Sample

PREFIX = "composite."
# The simulator's self-check: the identity on a plain tensor distributed as it is (run.place), so
# that distribute -> full_tensor() is checked on the path users take, for every placement and mesh.
SELF_CHECK = PREFIX + "distribute_tensor"

# chain name -> source of a function of x (a 3-D tensor)
CHAINS = {
    "distribute_tensor": "lambda x: x",
    "flatten_sum": "lambda x: x.flatten(0, 1).sum(0)",
    "flatten_sum_inner": "lambda x: x.flatten(1, 2).sum(1)",
    "view_mean": "lambda x: x.view(-1, x.shape[-1]).mean(0)",
    "reshape_sum": "lambda x: x.reshape(x.shape[0] * x.shape[1], x.shape[2]).sum(-1)",
    "flatten_softmax": "lambda x: torch.softmax(x.flatten(0, 1), dim=0)",
    "flatten_softmax_inner": "lambda x: torch.softmax(x.flatten(1, 2), dim=-1)",
    "flatten_layer_norm": "lambda x: torch.nn.functional.layer_norm(x.flatten(1, 2), (x.shape[1] * x.shape[2],))",
    "flatten_transpose": "lambda x: x.flatten(0, 1).transpose(0, 1)",
    "flatten_slice": "lambda x: x.flatten(0, 1)[1:-1]",
    "flatten_cat": "lambda x: torch.cat([x.flatten(0, 1), 2 * x.flatten(0, 1)], dim=0)",
    "flatten_cat_inner": "lambda x: torch.cat([x.flatten(0, 1), 2 * x.flatten(0, 1)], dim=1)",
    "flatten_select": "lambda x: x.flatten(0, 1).select(0, 1)",
    "flatten_select_inner": "lambda x: x.flatten(0, 1).select(1, 1)",
    "flatten_stack": "lambda x: torch.stack([x.flatten(0, 1), 2 * x.flatten(0, 1)], dim=0)",
}
# even: every dim divides by 2, 3, 4 and 6 as the default meshes need (and by split factors);
# uneven: no dim divides by any of them
SHAPES = ((12, 12, 6), (5, 7, 5))
DTYPES = ("float64", "float32", "float16", "bfloat16")


def names() -> tuple[str, ...]:
    return tuple(PREFIX + name for name in CHAINS)


def is_composite(op: str) -> bool:
    return op.startswith(PREFIX)


@functools.cache
def function(op: str):
    return eval(CHAINS[op.removeprefix(PREFIX)], {"torch": torch})  # our own source, above


def source(op: str) -> str:
    return CHAINS[op.removeprefix(PREFIX)]


def seeded(op: str, dtype: str, index: int) -> torch.Generator:
    """The generator sample ``index`` of a chain's in ``dtype`` is drawn from: the same in every process."""
    seed = int.from_bytes(hashlib.sha256(f"{op}|{dtype}|{index}".encode()).digest()[:4], "little")
    return torch.Generator().manual_seed(seed)


def samples(op: str, dtype: str) -> list[Sample]:
    found = []
    for index, shape in enumerate(SHAPES):
        generator = seeded(op, dtype, index)
        x = torch.randn(shape, generator=generator, dtype=torch.float64).to(getattr(torch, dtype))
        found.append(Sample(input=x, args=(), kwargs={}, output_process_fn_grad=lambda out: out))
    return found
