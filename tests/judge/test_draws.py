"""Draws judged against their parameters (``judge.draws``), and the ``draws`` search that makes that sharp.

A random op's values cannot be compared across layouts, so a kernel that reads
its parameter tensors through the wrong strides passed every reference. Each
planted kernel here reads ``p`` (``bernoulli``) or the category weights
(``multinomial``) as if contiguous; a run pointed at the op, with no flag
naming the search, finds it, names the overload, the non-contiguous layout and
the search's edit, and writes a repro that exits 1 while the plant is loaded.
The same runs without the plant are clean. (No ``from __future__ import
annotations``, as in tests/cases/test_schema_ops.py.)
"""

import json
import subprocess
import sys

import pytest
import torch

from torchsleuth.cli.main import main
from torchsleuth.errors import UsageError
from torchsleuth.judge.draws import ruled_out
from torchsleuth.run.samples import samples_of
from torchsleuth.search import draws as search

from conftest import AS_IF_CONTIGUOUS, plant_file  # the stride-ignoring read, and its plant, as tests/cases/test_schema_ops.py has them

BERNOULLI = AS_IF_CONTIGUOUS + '''

def bernoulli(p, *, generator=None):
    u = torch.empty(p.shape, dtype=p.dtype).uniform_(generator=generator)
    return (u < as_if_contiguous(p)).to(p.dtype)  # the bug: p's strides ignored


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("bernoulli", bernoulli, "CPU")
'''

MULTINOMIAL = AS_IF_CONTIGUOUS + '''

def multinomial(self, num_samples, replacement=False, *, generator=None):
    rows = as_if_contiguous(self).reshape(-1, self.shape[-1]).double()  # the bug: the weights' strides ignored
    if replacement:  # inverse CDF
        cdf = rows.cumsum(-1) / rows.sum(-1, keepdim=True)
        u = torch.rand(rows.shape[0], num_samples, dtype=torch.double, generator=generator)
        drawn = torch.searchsorted(cdf, u, right=True).clamp(max=rows.shape[1] - 1)
    else:  # Gumbel top-k: a weight of 0 is log 0, never among the top
        gumbel = -torch.log(-torch.log(torch.rand(rows.shape, dtype=torch.double, generator=generator)))
        drawn = (rows.log() + gumbel).topk(num_samples, dim=-1).indices
    return drawn.reshape(*self.shape[:-1], num_samples)


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("multinomial", multinomial, "CPU")
'''

NORMAL_FLOAT_TENSOR = AS_IF_CONTIGUOUS + '''

def normal(mean, std, *, generator=None):
    z = torch.empty(std.shape, dtype=std.dtype).normal_(generator=generator)
    return z * as_if_contiguous(std) + mean  # the bug: std's strides ignored


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("normal.float_Tensor", normal, "CPU")
'''

BERNOULLI_OUT = AS_IF_CONTIGUOUS + '''

def bernoulli_out(p, *, generator=None, out):
    u = torch.empty(p.shape, dtype=p.dtype).uniform_(generator=generator)
    out.copy_((u < as_if_contiguous(p)).to(out.dtype))  # the bug: p's strides ignored, in the out= kernel alone
    return out


library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    library.impl("bernoulli.out", bernoulli_out, "CPU")
'''

FLAGS = ["--dtypes", "float32", "--oracles", "none", "--no-progress", "--workers", "1"]


def run(tmp_path, op: str, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    status = main(["ops", "--ops", op, *FLAGS, *extra, "--out", str(out), "--json", str(out / "findings.json")])
    return status, json.loads((out / "findings.json").read_text())


# --- the rules ----------------------------------------------------------------------------------


def test_normal_must_draw_mean_where_std_is_zero_and_stay_near_it_elsewhere():
    mean, std = torch.tensor([5.0, -1000.0, 3.0]), torch.tensor([0.0, 0.0, 1.0])
    assert ruled_out("aten.normal.Tensor_Tensor", {"mean": mean, "std": std}, torch.tensor([5.0, -1000.0, 3.7])) is None
    what, wrong, numel = ruled_out("aten.normal.Tensor_Tensor", {"mean": mean, "std": std}, torch.tensor([5.0, 1000.0, 3.7]))
    assert (wrong, numel) == (1, 3) and "where std is 0" in what
    what, wrong, _ = ruled_out("aten.normal.Tensor_float", {"mean": mean, "std": 1.0}, torch.tensor([5.0, -1000.0, 30.0]))
    assert wrong == 1 and "standard deviations" in what
    torch.manual_seed(0)
    big = torch.full((100_000,), 7.0)
    assert ruled_out("aten.normal.Tensor_float", {"mean": big, "std": 0.5}, torch.normal(big, 0.5)) is None  # real draws pass


def test_bernoulli_must_draw_p_where_p_is_zero_or_one():
    p = torch.tensor([0.0, 1.0, 0.5, 0.5])
    assert ruled_out("aten.bernoulli.default", {"self": p}, torch.tensor([0.0, 1.0, 1.0, 0.0])) is None
    assert ruled_out("aten.bernoulli.default", {"self": p}, torch.tensor([1.0, 1.0, 1.0, 0.0]))[1] == 1
    assert ruled_out("aten.bernoulli_.Tensor", {"self": torch.zeros(4), "p": p}, torch.tensor([0.0, 0.0, 1.0, 0.0]))[1] == 1
    assert ruled_out("aten.bernoulli.p", {"self": torch.zeros(2), "p": 0.5}, torch.tensor([0.0, 0.5]))[1] == 1  # only 0 and 1


def test_multinomial_never_draws_a_category_of_probability_zero_and_without_replacement_never_twice():
    weights = torch.tensor([[0.0, 1.0, 2.0, 0.0], [3.0, 0.0, 1.0, 1.0]])
    params = {"self": weights, "num_samples": 2, "replacement": False}
    assert ruled_out("aten.multinomial.default", params, torch.tensor([[1, 2], [0, 3]])) is None
    assert "probability 0" in ruled_out("aten.multinomial.default", params, torch.tensor([[1, 3], [0, 3]]))[0]
    assert "twice" in ruled_out("aten.multinomial.default", params, torch.tensor([[1, 2], [0, 0]]))[0]
    assert "outside" in ruled_out("aten.multinomial.default", params, torch.tensor([[1, 4], [0, 2]]))[0]
    # more draws without replacement than categories of probability > 0: torch documents no result, so none is judged
    lone = {"self": torch.tensor([0.0, 1.0, 0.0]), "num_samples": 3, "replacement": False}
    assert ruled_out("aten.multinomial.default", lone, torch.tensor([1, 0, 2])) is None


def test_factories_draw_in_range_and_randperm_permutes():
    assert ruled_out("aten.randint.low", {"low": 2, "high": 5, "size": [3]}, torch.tensor([2, 4, 5]))[1] == 1
    assert ruled_out("aten.rand_like.default", {"self": torch.zeros(2)}, torch.tensor([0.5, 1.5]))[1] == 1
    assert ruled_out("aten.randperm.default", {"n": 4}, torch.tensor([0, 2, 2, 3]))[1] >= 1
    assert ruled_out("aten.randperm.default", {"n": 4}, torch.tensor([3, 1, 0, 2])) is None
    assert ruled_out("aten.exponential.default", {"self": torch.zeros(2)}, torch.tensor([-1.0, 2.0])) is None  # no rule: not judged


# --- the search ---------------------------------------------------------------------------------


def test_the_search_gives_each_parameter_the_set_its_schema_name_calls_for_whatever_wrapper_calls_the_op():
    sample = next(s for s in samples_of("normal", "float32") if s.input.dim() == 3)  # torch.normal(mean, std)
    mean = sample.input
    drawn = ("draw:args[0]=deviation", "draw:input=mean")
    # and each parameter another overload takes as a number (normal.Tensor_float's std, normal.float_Tensor's mean) made one
    assert search.plan("normal", "functional", "float32", sample) == [drawn, (*drawn, "scalar:args[0]"), (*drawn, "scalar:input")]
    assert search.plan("normal", "inplace", "float32", sample) == search.plan("normal", "out", "float32", sample) == [drawn]
    assert search.plan("normal", "backward", "float32", sample) == []
    assert search.plan("add", "functional", "float32", sample) == []  # not a random op
    edited = search.apply(sample, "args[0]=deviation")
    assert edited.args[0].flatten()[:7].tolist() == list(search.SETS["deviation"]) and edited.input is mean
    number_mean = next(s for s in samples_of("normal.number_mean", "float32") if isinstance(s.args[0], torch.Tensor))
    assert search.plan("normal.number_mean", "functional", "float32", number_mean) == [("draw:args[0]=mean",)]  # its lambda swaps them
    with pytest.raises(UsageError, match="allowed: probability"):
        search.apply(sample, "input=nope")
    laid = search.assignments("normal", ("draw:input=mean",), sample, ("contiguous", "transposed", "strided"))
    assert laid[0] == () and {layout for assignment in laid[1:] for _, layout in assignment} == {"transposed", "strided"}


@pytest.fixture
def planted_bernoulli(tmp_path):
    yield from plant_file(tmp_path / "plant_bernoulli.py", BERNOULLI)


@pytest.fixture
def planted_multinomial(tmp_path):
    yield from plant_file(tmp_path / "plant_multinomial.py", MULTINOMIAL)


def _found(report, op):
    found = [f for f in report["findings"] if f["op"] == op]
    assert found and {f["kind"] for f in found} == {"random_coverage"}
    assert all(any(a["layout"] != "contiguous" for a in f["args"]) for f in found)
    assert any("draw:" in f["found_as"] for f in found)  # the search's case found it
    return found


@pytest.mark.slow
def test_a_bernoulli_that_ignores_p_strides_is_found_by_a_run_pointed_at_it(tmp_path, planted_bernoulli):
    status, report = run(tmp_path, "bernoulli", "--import", planted_bernoulli)
    assert status == 1
    found = _found(report, "aten.bernoulli.default")
    assert "other than p where p is 0 or 1" in found[0]["summary"]
    script = tmp_path / "out" / found[0]["repro"]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "BUG PRESENT" in done.stdout, done.stdout + done.stderr


def test_a_multinomial_that_ignores_the_weights_strides_is_found(tmp_path, planted_multinomial):
    status, report = run(tmp_path, "multinomial", "--import", planted_multinomial)
    assert status == 1
    assert "categories of probability 0" in _found(report, "aten.multinomial.default")[0]["summary"]


@pytest.fixture
def planted_normal(tmp_path):
    yield from plant_file(tmp_path / "plant_normal.py", NORMAL_FLOAT_TENSOR)


@pytest.mark.slow
def test_an_overload_only_a_number_parameter_reaches_is_found(tmp_path, planted_normal):
    # no sample of any normal entry calls normal.float_Tensor (a number mean, a tensor std), and the overloads search
    # leaves random ops alone: the draws search makes the mean a number
    status, report = run(tmp_path, "normal", "--import", planted_normal)
    assert status == 1
    found = _found(report, "aten.normal.float_Tensor")
    assert all("scalar:input" in f["found_as"] for f in found) and "where std is 0" in found[0]["summary"]


@pytest.fixture
def planted_bernoulli_out(tmp_path):
    yield from plant_file(tmp_path / "plant_bernoulli_out.py", BERNOULLI_OUT)


@pytest.mark.slow
def test_an_out_kernel_that_ignores_p_strides_is_found_and_its_repro_calls_that_kernel(tmp_path, planted_bernoulli_out):
    # an out= case lays out only out; the search's cases lay out p as well
    status, report = run(tmp_path, "bernoulli", "--variants", "out", "--import", planted_bernoulli_out)
    assert status == 1
    found = _found(report, "aten.bernoulli.out")
    script = (tmp_path / "out" / found[0]["repro"]).read_text()
    assert "OP = 'aten.bernoulli.out'" in script and "RULE = 'aten.bernoulli.default'" in script
    done = subprocess.run([sys.executable, str(tmp_path / "out" / found[0]["repro"])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "BUG PRESENT" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
def test_the_same_runs_without_the_plants_are_clean(tmp_path):
    status, report = run(tmp_path, "bernoulli,multinomial,normal,bernoulli_")
    assert (status, report["findings"]) == (0, [])
