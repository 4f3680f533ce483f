"""judge/canonical.py: where two different answers are both right (ties, a vector's phase, mode's frequencies, a
dtype's limits), and where two answers that differ otherwise are not."""

from __future__ import annotations

import torch

from torchsleuth.judge import canonical


def close(a, b):
    return torch.allclose(a, b, atol=1e-6)


def test_indices_of_equal_values_agree_and_of_different_values_do_not():
    x = torch.tensor([[3.0, 1.0, 3.0], [2.0, 2.0, 0.0]])
    assert canonical.same_up_to_ties(x, torch.tensor([0, 0]), torch.tensor([2, 1]))  # argmax along dim 1: either 3, either 2
    assert not canonical.same_up_to_ties(x, torch.tensor([1, 0]), torch.tensor([2, 1]))  # a 1 is not a 3
    assert canonical.same_up_to_ties(x, torch.tensor(0), torch.tensor(2))  # flattened
    assert not canonical.same_up_to_ties(x, torch.tensor(0), torch.tensor(2, dtype=torch.int32))  # indices are int64


def test_gradients_routed_through_ties_agree_when_each_group_of_equal_values_gets_the_same_total():
    x = torch.tensor([1.0, 2.0, 1.0])
    assert canonical.gradients_agree_up_to_ties(x, torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 1.0]), close)
    assert canonical.gradients_agree_up_to_ties(x, torch.tensor([0.5, 0.0, 0.5]), torch.tensor([1.0, 0.0, 0.0]), close)
    assert not canonical.gradients_agree_up_to_ties(x, torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0]), close)


def test_vectors_agree_up_to_a_sign_each_and_a_factorization_by_what_it_rebuilds():
    torch.manual_seed(0)
    a = torch.randn(4, 4, dtype=torch.float64)
    u, s, vh = torch.linalg.svd(a)
    signs = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    assert canonical.same_up_to_phase(u * signs, u, close)  # columns turned
    assert canonical.same_up_to_phase(signs[:, None] * vh, vh, close)  # rows turned
    assert not canonical.same_up_to_phase(u[:, [1, 0, 2, 3]], u, close)  # two vectors swapped
    expected = [("U", u), ("S", s), ("Vh", vh)]
    assert canonical.same_factorization([("U", u * signs), ("S", s), ("Vh", signs[:, None] * vh)], expected, close)
    assert not canonical.same_factorization([("U", u), ("S", s * 2), ("Vh", vh)], expected, close)
    values, vectors = torch.linalg.eigh(a + a.T)
    assert canonical.same_factorization([("L", values), ("V", -vectors)], [("L", values), ("V", vectors)], close)


def test_mode_values_agree_when_equally_frequent_in_their_row():
    x = torch.tensor([[1, 1, 2, 2, 3], [4, 4, 4, 5, 5]])
    assert canonical.same_frequency(x, torch.tensor([1, 4]), torch.tensor([2, 4]))  # 1 and 2 both twice
    assert not canonical.same_frequency(x, torch.tensor([3, 4]), torch.tensor([2, 4]))  # 3 once, 2 twice
    assert not canonical.same_frequency(x, torch.tensor([1, 5]), torch.tensor([1, 4]))


def test_float64s_largest_values_stand_for_the_case_dtypes():
    wide, narrow = torch.finfo(torch.float64).max, torch.finfo(torch.float32).max
    limited = canonical.at_dtype_limits(torch.tensor([wide, -wide, 1.5], dtype=torch.float64), torch.float32)
    assert limited.tolist() == [narrow, -narrow, 1.5]
    both = canonical.at_dtype_limits(torch.complex(torch.tensor([wide], dtype=torch.float64), torch.tensor([-wide], dtype=torch.float64)),
                                     torch.complex64)
    assert (both.real.item(), both.imag.item()) == (narrow, -narrow)
    ints = torch.tensor([1, 2])
    assert canonical.at_dtype_limits(ints, torch.float32) is ints
