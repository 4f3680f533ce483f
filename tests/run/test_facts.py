"""run.facts: the facts a case is judged by, read off its references' trace once per references object."""

from __future__ import annotations

from torchsleuth.cases.records import Unit
from torchsleuth.config import SweepConfig
from torchsleuth.engine import run_unit
from torchsleuth.run import facts as facts_module
from torchsleuth.run import references as references_module


def test_every_case_of_a_sample_gets_the_facts_read_once_off_its_references(monkeypatch):
    read, asked, made = [], [], []
    real_facts, real_of, real_init = facts_module.facts, facts_module.of_references, references_module.References.__init__

    def counting_facts(*args, **kwargs):
        read.append(1)
        return real_facts(*args, **kwargs)

    def counting_of(refs, name):
        found = real_of(refs, name)
        asked.append((refs, found))  # held, so that no later references object takes a collected one's id
        return found

    def counting_init(self, *args, **kwargs):
        made.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(facts_module, "facts", counting_facts)
    monkeypatch.setattr("torchsleuth.engine.facts_of", counting_of)
    monkeypatch.setattr(references_module.References, "__init__", counting_init)
    config = SweepConfig(ops=("sum",), dtypes=("float32",), samples=3)
    events = list(run_unit(Unit(op="sum", dtype="float32", device="cpu"), config, frozenset(), only=None))
    assert sum(1 for kind, _ in events if kind == "outcome") > 3 * len(made)  # many cases ask of each references object
    assert len(asked) > len(read) and len(read) <= len(made)  # ... and each is read once
    fresh = {}
    for refs, found in asked:  # a case asking again gets what the first got
        assert fresh.setdefault(id(refs), found) == found
    assert all(isinstance(found, facts_module.Facts) and found.op.startswith("aten.sum") for _, found in asked)
