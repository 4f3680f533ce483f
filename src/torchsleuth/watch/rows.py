"""Where watch's step checks read a tensor, and the reading: a row of POSITIONS values per parameter (watch.invariants).

Design note. A frozen parameter or an unwritten state is frozen or unwritten
everywhere, so a couple of hundred positions of each tensor tell, for a
fraction of a pass. In a tensor that fills its storage (dense in any order of
its dims, as parameters, their gradients and their states are) the positions
are an evenly spaced grid of its storage from an offset drawn once per shape
and strides (``Positions``, from a generator of watch's own: the program's
draws stay its own), so reading them is a view, and the views of every
parameter become one row each in a single copy (``stacked``); a parameter's
views are made once and kept while it keeps its storage. A tensor that does
not fill its storage, is smaller than the grid, or is laid out otherwise
than its parameter is read at flat indices (a ``torch.take`` each): the
grid's elements by their flat index, or POSITIONS drawn ones. The same
position is the same element in a parameter, its gradient and its states.
"""

from __future__ import annotations

import torch


class Positions:
    """The positions looked at in tensors laid out like a parameter, chosen once per shape, strides and device."""

    def __init__(self):
        self._chosen: dict[tuple, object] = {}
        self._generator = torch.Generator().manual_seed(0)  # not the program's: its draws stay its own

    def of(self, p: torch.Tensor) -> "torch.Tensor | Grid":
        """A grid of ``p``'s storage where it fills its storage, else POSITIONS drawn flat indices."""
        key = (tuple(p.shape), p.stride(), p.device)
        if key not in self._chosen:
            n = p.numel()
            if n >= POSITIONS and fills_storage(p.shape, p.stride()):
                spacing = n // POSITIONS
                start = int(torch.randint(n - spacing * (POSITIONS - 1), (), generator=self._generator))
                self._chosen[key] = Grid(start, spacing)
            else:
                self._chosen[key] = torch.randint(n, (1, POSITIONS), generator=self._generator).to(p.device)
        return self._chosen[key]


# Positions per tensor the step checks look at (where the gradient is nonzero).
POSITIONS = 256


class Rows:
    """The parameters of one device, and what was read of them before the step: a row each."""

    def __init__(self):
        self.params: list[torch.Tensor] = []  # what is read: each parameter, or its shard on this rank (a DTensor's)
        self.owners: list[torch.Tensor] = []  # the parameters themselves, as the optimizer holds them
        self.positions: list = []  # each parameter's: a Grid, or flat indices
        self.views: tuple[list, list] | None = None  # the parameters' storage addresses, their grids' rows (views)
        self.moving: torch.Tensor | None = None  # where each gradient is nonzero
        self.values: torch.Tensor | None = None  # the parameters before the step
        self.grads_finite: torch.Tensor | None = None

    def add(self, p: torch.Tensor, positions, owner: torch.Tensor | None = None) -> None:
        self.params.append(p)
        self.owners.append(p if owner is None else owner)
        self.positions.append(positions)

    def read(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """Each of ``tensors`` (one per parameter, shaped like it) at its parameter's positions: a row each."""
        return stacked([read(t, p, at) for t, p, at in zip(tensors, self.params, self.positions)])

    def read_params(self) -> torch.Tensor:
        """The parameters at their positions. A grid's row is a view, made once while its parameter keeps its storage;
        drawn flat indices are read anew (a copy)."""
        addresses = [p.data_ptr() for p in self.params]
        if self.views is None or self.views[0] != addresses:
            self.views = (addresses, [read(p, p, at) if isinstance(at, Grid) else None for p, at in zip(self.params, self.positions)])
        return stacked([torch.take(p, at) if view is None else view for view, p, at in zip(self.views[1], self.params, self.positions)])


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def read(t: torch.Tensor, p: torch.Tensor, positions) -> torch.Tensor:
    """``t`` (``p`` or a tensor shaped like it) at ``p``'s positions, a row: a view of its storage's grid where ``t`` is
    laid out as ``p`` is (the same storage index is the same element), else its elements at the same flat indices.
    Under ``no_grad``: the views need no graph."""
    if isinstance(positions, Grid):
        if t.stride() == p.stride() and t.shape == p.shape:
            return t.as_strided((1, POSITIONS), (POSITIONS * positions.spacing, positions.spacing), t.storage_offset() + positions.start)
        positions = positions.flat(p)  # laid out otherwise: the grid's elements by their flat index
    return torch.take(t, positions)


class Grid:
    """Every ``spacing``-th storage index of a tensor that fills its storage, from ``start``: POSITIONS of them."""

    def __init__(self, start: int, spacing: int):
        self.start, self.spacing = start, spacing
        self._flat: torch.Tensor | None = None

    def flat(self, p: torch.Tensor) -> torch.Tensor:
        """The flat (row-major) indices of the grid's elements in ``p``: for a tensor laid out otherwise."""
        if self._flat is None:
            n = p.numel()
            storage = torch.arange(n, device=p.device).as_strided(p.shape, p.stride())  # each element's storage index
            flat = torch.empty(n, dtype=torch.long, device=p.device)
            flat[storage.reshape(-1)] = torch.arange(n, device=p.device)  # each storage index's element, flat
            self._flat = flat[self.start::self.spacing][:POSITIONS].reshape(1, POSITIONS)
        return self._flat


def fills_storage(shape, stride) -> bool:
    """Whether a tensor of this shape and these strides is dense in some order of its dims: its elements are the
    storage indices 0 .. numel - 1 from its offset, each once."""
    expected = 1
    for size, step in sorted(((s, st) for s, st in zip(shape, stride) if s != 1), key=lambda d: d[1]):
        if step != expected:
            return False
        expected *= size
    return True


def stacked(rows: list[torch.Tensor]) -> torch.Tensor:
    """Rows of positions, one tensor: one copy on the device (of views: no copy before it)."""
    if len({t.dtype for t in rows}) > 1:  # mixed precision: in a dtype that holds every value exactly
        rows = [t.to(torch.complex128 if t.is_complex() else torch.float64) for t in rows]
    return torch.cat(rows)
