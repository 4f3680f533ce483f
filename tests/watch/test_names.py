"""Module names for a watched program (watch.names): found among the live objects, whatever else lives there."""

from __future__ import annotations

import gc
import weakref

import torch

from torchsleuth.watch import names


class _Gone:
    pass


def test_a_dead_weak_proxy_among_the_live_objects_does_not_stop_the_search_for_modules():
    target = _Gone()
    proxy = weakref.proxy(target)
    del target  # the proxy outlives its object: isinstance on it raises ReferenceError
    assert gc.is_tracked(proxy) and any(o is proxy for o in gc.get_objects())
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    found = names._live_modules()
    assert any(m is model for m in found) and any(m is model[0] for m in found)
    assert names.module_names()[id(model[0])].endswith("0")
