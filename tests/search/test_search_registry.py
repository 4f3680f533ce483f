"""A search is one module with a ``Search`` record (search.registry): a new one is found, planned, applied, listed in
``--help`` and its finding named with its edit, with nothing else edited; a malformed registry says what is wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from torchsleuth import SweepConfig, resolve_ops, search
from torchsleuth.cases.records import Case
from torchsleuth.errors import UsageError
from torchsleuth.run.samples import samples_of
from torchsleuth.search import edits, registry
from torchsleuth.sweep import depth

# A whole search, as a contributor writes it: values OpInfo's random samples never hold exactly.
HALVES = '''
import torch

from torchsleuth.run import tree
from torchsleuth.search.registry import Search

VERB = "halves"


def plan(op, variant, dtype, sample):
    if variant != "functional" or not getattr(torch, dtype).is_floating_point:
        return []
    return [(f"{VERB}:{path}",) for path in tree.sample_tensors(sample)]


def apply(sample, rest, *, op=""):
    return tree.map_sample_tensors(sample, lambda path, t: torch.full_like(t, 0.5) if path == rest else t)


SEARCH = Search(name="halves", description="every element of one tensor exactly 0.5", edits="one tensor's values", order=70,
                plan=plan, verb=VERB, form="halves:PATH", apply=apply)
'''


@pytest.fixture
def halves(tmp_path, monkeypatch):
    """The search above, as a module of the search package (a folder on its ``__path__``), found by the registry."""
    folder = tmp_path / "more_searches"
    folder.mkdir()
    (folder / "halves.py").write_text(HALVES)
    monkeypatch.setattr(search, "__path__", [*search.__path__, str(folder)])
    registry.searches.cache_clear()
    yield folder
    registry.searches.cache_clear()
    sys.modules.pop("torchsleuth.search.halves", None)


def abs_wrong_at_a_half(x):
    """``abs`` whose float32 kernel returns 1.5 where an element is exactly 0.5, a value OpInfo's random samples never
    hold (the float64 reference's kernel is right)."""
    out = torch.ops.aten.abs.out(x, out=torch.empty_like(x))
    return torch.where(x == 0.5, torch.full_like(out, 1.5), out) if x.dtype == torch.float32 else out


def config(**extra) -> SweepConfig:
    return SweepConfig(**{**dict(ops=resolve_ops("abs"), dtypes=("float32",), variants=("functional",), layouts=("contiguous",),
                                 workers=0, search=("halves",)), **extra})


def test_a_search_added_as_one_module_is_found_applied_and_names_its_finding(halves, plant, run_sweep):
    assert search.names()[-1] == "halves" and registry.get("halves").edits == "one tensor's values"
    sample = samples_of("abs", "float32")[0]
    [edit] = search.plan(("halves",), "abs", "functional", "float32", sample)
    assert edit == ("halves:input",)
    assert (edits.apply(sample, edit).input == 0.5).all()  # the edit language knows the new verb
    plant("abs", abs_wrong_at_a_half)
    found = run_sweep(depth(config(), deep=True, given={"oracles"})).findings
    assert found and all(f.op == "aten.abs.default" and f.kind == "mismatch" for f in found)
    assert {Case.parse(f.case_id).edits for f in found} == {("halves:input",)}  # named with its trigger


def test_the_same_run_without_the_plant_is_clean_and_without_the_search_misses_it(halves, plant, run_sweep):
    assert not run_sweep(depth(config(), deep=True, given={"oracles"})).findings
    plant("abs", abs_wrong_at_a_half)
    assert not run_sweep(config(search=(), samples=0)).findings  # only the search reaches it


@pytest.mark.slow
def test_the_help_lists_a_new_search_and_an_unknown_edit_names_its_form(halves):
    code = (f"import torchsleuth.search as s; s.__path__.append({str(halves)!r}); import sys; from torchsleuth.cli.main import main; "
            "sys.argv = ['torchsleuth', 'ops', '--help']; main()")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "halves            every element of one tensor exactly 0.5" in shown
    with pytest.raises(UsageError, match=r"unknown sample edit 'nothing:input'; allowed: .*halves:PATH"):
        edits.apply(samples_of("abs", "float32")[0], ("nothing:input",))
    with pytest.raises(UsageError, match="unknown search 'halve'; known: .*halves"):
        registry.get("halve")


def test_a_registry_with_two_searches_of_one_name_or_a_verb_without_its_apply_is_refused(halves):
    (halves / "again.py").write_text(HALVES.replace('order=70', 'order=80').replace('VERB = "halves"', 'VERB = "again"'))
    registry.searches.cache_clear()
    with pytest.raises(ValueError, match="two searches share the name halves"):
        registry.searches()
    with pytest.raises(ValueError, match="a verb comes with its form and its apply"):
        registry.Search(name="x", description="", edits="", order=1, plan=lambda *a: [], verb="x", form="x:PATH")
    sys.modules.pop("torchsleuth.search.again", None)
