"""The repro script of a compiled chain's finding: plain torch, the chain compiled by ``torch.compile``.

Design note. A chain's finding records the anchor's call (the case's tensors,
exactly, and the anchor's arguments: ``torch.sum(T['input'], dim=-1)``), as
a compiled-variant finding does; its script is the compiled variant's
(script.compiled_variant: the generic script of the check, ``call``
compiled, the reference eager), with the bodies of ``call`` and
``reference`` made the chain around that call: each step's own source from
the table (chain_steps.STEPS), the very text the oracle ran. So the script
imports nothing of torchsleuth, and exits 1 while the compiled chain differs
from the eager one beyond the tolerance, 0 once it agrees, 2 when it cannot
be checked.
"""

from __future__ import annotations

from ...cases.records import Case
from ...judge.records import Finding
from .chain_steps import Chain, of_oracle
from .script import compiled_variant


def body(chain: Chain, anchor_source: str) -> list[str]:
    """The lines of a function of ``T`` (the tensors by path) that runs ``chain`` around ``anchor_source``."""
    lines = ["    T = dict(T)", '    x = T["input"]']
    lines += [f"    x = {step.source}  # {step.name}" for step in chain.pre]
    lines += ['    T["input"] = x', f"    x = {anchor_source}  # the op, as the sweep called it"]
    lines += [f"    x = {step.source}  # {step.name}" for step in chain.post]
    return lines + ["    return x"]


def script(finding: Finding, torch_version: str) -> str | None:
    chain = of_oracle(Case.parse(finding.case_id).oracle)
    text = compiled_variant(finding, torch_version, dynamic=False)
    lines = text.split("\n")
    for name in ("call", "reference"):
        if f"def {name}(T):" not in lines:
            continue
        at = lines.index(f"def {name}(T):")
        ret = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("    return "))
        lines[ret:ret + 1] = body(chain, lines[ret].removeprefix("    return "))
        doc = (f'    """The chain {chain.spec}, as torchsleuth compiled it: its steps\' source, the op\'s call between them."""'
               if name == "call" else f'    """The expected value: the same chain, eager ({lines[at + 1].strip().strip(chr(34))})"""')
        if lines[at + 1].startswith('    """'):
            lines[at + 1] = doc
    return "\n".join(lines)
