"""OpInfo's samples as torchsleuth makes them: the same wherever they are made, without walking the stack.

OpInfo's sample iterators look for the unittest test they run in (``inspect.stack()``) to seed each sample by the
test's name; torchsleuth's samples are seeded by op and dtype alone (cases.opinfo), so a case means the same values
in a worker, in the shrinker and under a user's own unittest test that calls ``torchsleuth.check``.
"""

from __future__ import annotations

import inspect
import sys
import unittest

import torch
from torchsleuth.cases import opinfo


def _tensors(sample) -> list[torch.Tensor]:
    flat = [sample.input, *sample.args, *sample.kwargs.values()]
    return [t for t in flat if isinstance(t, torch.Tensor)]


def test_samples_made_inside_a_unittest_test_equal_those_made_outside_and_no_stack_is_walked(monkeypatch):
    entry = opinfo.get("addcmul")
    outside = opinfo.samples(entry, torch.float32)
    walked, stack = [], inspect.stack
    monkeypatch.setattr(inspect, "stack", lambda *a, **k: walked.append(1) or stack(*a, **k))
    every_generator, seed = [], torch.manual_seed  # seeds every GPU's generator too: samples are made on the CPU
    monkeypatch.setattr(torch, "manual_seed", lambda *a: every_generator.append(1) or seed(*a))
    made = {}

    class Inside(unittest.TestCase):
        def test_make(self):
            made["inside"] = opinfo.samples(entry, torch.float32)

    result = Inside("test_make").run(unittest.TestResult())
    assert result.wasSuccessful(), result.errors
    assert walked == [] and every_generator == []
    assert len(made["inside"]) == len(outside) > 3
    for mine, theirs in zip(made["inside"], outside):
        assert [t.shape for t in _tensors(mine)] == [t.shape for t in _tensors(theirs)]
        assert all(torch.equal(a, b) for a, b in zip(_tensors(mine), _tensors(theirs)))
    # the lookup and the seeding are OpInfo's own again once the samples are made
    common_utils = sys.modules["torch.testing._internal.common_utils"]
    assert common_utils.extract_test_fn.__module__ == common_utils.set_rng_seed.__module__ == common_utils.__name__
