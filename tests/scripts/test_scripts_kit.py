"""The repro kit: its helpers are plain functions, and ``source`` copies them into scripts that still work.

The helpers are tested here as the functions they are; ``source`` is tested
by compiling what it copies; and one script of a planted finding (the
approach of test_repro.py, whose helpers are reused) still exits 1 with the
bug and 0 without it.
"""

from __future__ import annotations

import base64
import inspect
import math
import runpy
import zlib

import pytest
import torch
from test_repro import PLANT_HEAD, finding_for, output, run_scripts

from torchsleuth.report import repro
from torchsleuth.run import call
from torchsleuth.scripts import kit, parts


def encoded(storage: torch.Tensor) -> str:
    """A storage as scripts carry it inline: zlib-compressed, base85-encoded bytes."""
    return base64.b85encode(zlib.compress(storage.view(torch.uint8).numpy().tobytes())).decode("ascii")


# --- the helpers, as plain functions ---------------------------------------------------------


def test_rebuild_views_the_whole_storage_at_its_offset():
    storage = torch.arange(20, dtype=torch.float32)
    t = kit.rebuild("float32", "cpu", 20, (3, 2), (1, 4), 5, encoded(storage), requires_grad=True)
    assert (tuple(t.shape), t.stride(), t.storage_offset()) == ((3, 2), (1, 4), 5)
    assert t.requires_grad and t.is_leaf
    assert torch.equal(t.detach(), storage.as_strided((3, 2), (1, 4), 5))
    assert t.untyped_storage().nbytes() == storage.untyped_storage().nbytes()  # the gaps come back too


def test_rebuild_without_data_is_seeded_and_repeatable():
    first = kit.rebuild("float64", "cpu", 12, (2, 3), (6, 2), 1, seed=3)
    second = kit.rebuild("float64", "cpu", 12, (2, 3), (6, 2), 1, seed=3)
    assert (first.stride(), first.storage_offset()) == ((6, 2), 1)
    assert torch.equal(first, second)
    assert kit.rebuild("bool", "cpu", 4, (4,), (1,), 0, seed=1).dtype == torch.bool


def test_compare_reports_a_mismatch_and_passes_equal_tensors(capsys, monkeypatch):
    a = torch.tensor([1.0, 2.0, float("nan")])
    assert kit.compare([("out", a)], [("out", a.clone())])
    assert "0 of 3 element(s) differ" in capsys.readouterr().out
    assert not kit.compare([("out", a)], [("out", torch.tensor([1.0, 2.5, float("nan")]))])
    printed = capsys.readouterr().out
    assert "1 of 3 element(s) differ" in printed and "<- worst" in printed
    monkeypatch.setattr(kit, "ATOL", 1.0)  # a script's own tolerance, read as a global
    assert kit.compare([("out", a)], [("out", torch.tensor([1.0, 2.5, float("nan")]))])
    assert not kit.compare([("out", a)], [("out", a), ("out[1]", a)])  # structure first
    assert "structure" in capsys.readouterr().out


def test_same_bits_tells_nans_and_signed_zeros_apart():
    nan = torch.tensor([float("nan")])
    other_nan = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)  # another payload
    assert bool(kit.same_bits(nan, nan.clone()).all())
    assert not bool(kit.same_bits(nan, other_nan).any())
    assert kit.same_bits(torch.tensor([0.0, -0.0]), torch.tensor([-0.0, -0.0])).tolist() == [False, True]
    assert kit.same_bits(torch.tensor([True, False]), torch.tensor([True, True])).tolist() == [True, False]


def test_storage_bytes_and_view_mask_cover_the_whole_storage():
    t = torch.arange(10, dtype=torch.int16).as_strided((2, 2), (4, 1), 1)
    assert tuple(kit.storage_bytes(t).shape) == (10, 2)
    assert kit.view_mask(10, (2, 2), (4, 1), 1).nonzero().reshape(-1).tolist() == [1, 2, 5, 6]
    assert not bool(kit.view_mask(10, (0, 2), (4, 1), 1).any())


def test_leaves_name_paths_as_torchsleuth_does():
    x = torch.zeros(1)
    assert [p for p, _ in kit.leaves((x, [x, 2]))] == ["out[0]", "out[1][0]", "out[1][1]"]
    assert [p for p, _ in kit.leaves({"grad[input]": x})] == ["grad[input]"]
    assert kit.leaves(torch.Size([2]))[0][0] == "out"


# --- copying them -----------------------------------------------------------------------------


def test_source_copies_what_was_asked_and_what_it_uses(tmp_path):
    text = kit.source("compare", "load_imports")
    (tmp_path / "copied.py").write_text(text)
    namespace = runpy.run_path(str(tmp_path / "copied.py"), init_globals={"torch": torch, "ATOL": 0.0, "RTOL": 0.0, "IMPORTS": ()})
    for name in ("compare", "agree", "same_bits", "show", "fmt", "load_imports", "GLOBALS"):
        assert name in namespace, name
    assert "rebuild" not in namespace and "ATOL = " not in text  # only what was asked; a script's constants are its own
    assert inspect.getsource(kit.agree) in text  # the kit's code, verbatim
    assert namespace["compare"]([("out", torch.ones(2))], [("out", torch.ones(2))])
    assert kit.imports("load_imports") == ("importlib", "runpy")
    assert kit.imports("rebuild") == ("base64", "zlib")
    with pytest.raises(KeyError, match="no helper 'nothing'"):
        kit.source("nothing")


def test_every_helper_copies_into_a_script_that_compiles():
    names = tuple(kit._copyable())
    assert {"rebuild", "seeded", "leaves", "copies", "gradients", "compare", "describe", "storage_bytes", "view_mask"} <= set(names)
    assert "source" not in names and "imports" not in names
    compile(kit.source(*names), "kit.py", "exec")


def test_a_helpers_source_is_read_once_however_many_scripts_copy_it(monkeypatch):
    # a whole catalog's report writes a script per finding, each copying tens of helpers
    for cached in (kit._text, kit._names_used, kit._closure):
        cached.cache_clear()
    read = []
    getsource = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: read.append(obj) or getsource(obj))
    first = [kit.source("compare", "rebuild"), kit.imports("compare", "rebuild")]
    once = len(read)
    assert once and len(set(map(id, read))) == len(read)  # each helper's source read once
    assert [kit.source("compare", "rebuild"), kit.imports("compare", "rebuild")] == first  # the same text again
    kit.source("rebuild")
    assert len(read) == once  # and nothing read again


def test_constants_are_the_engines():
    finding, _ = finding_for("dropped_write")
    text = repro.script(finding)
    assert f"CALL_SEED = {call.CALL_SEED!r}" in text
    assert kit.HANG_SECONDS > 0
    nan, _ = call.prefills(torch.float32)
    assert math.isnan(nan) and call.prefills(torch.bool) == (False, True) and call.prefills(torch.int64) == (7, 11)
    assert parts.call_source(finding.call) in text


# --- a script made of it -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_planted_finding_script_fails_with_the_bug_and_passes_without(tmp_path):
    finding, plant = finding_for("out_of_view_write")
    text = repro.script(finding)
    assert inspect.getsource(kit.storage_bytes) in text and inspect.getsource(kit.view_mask) in text
    runs = run_scripts(tmp_path, clean=text, buggy=PLANT_HEAD + plant + text)
    assert runs["clean"].returncode == 0, output(runs["clean"])
    assert runs["buggy"].returncode == 1, output(runs["buggy"])
    assert "BUG PRESENT" in runs["buggy"].stdout
