"""The draws check: a random op's kernel, called with the case's tensors, must draw what its parameters allow.

Design note. A draws finding (``judge.contracts.draws``) carries in
``Finding.data`` the aten overload that drew, which tensor of the call each
of its tensor arguments is (by sample path) and its other arguments that are
plain numbers (``judge.draws.encode``). The script rebuilds the call's
tensors exactly, calls that overload on them directly (``torch.ops.aten``:
whatever Python wrapper made the call, the kernel is the same), and applies
the same rule the judge did, whose source it carries (``judge.draws.SOURCES``).
An argument the record could not name (a tensor the call derives, a
generator) is left at its default; a tensor argument it could not name makes
no script.
"""

from __future__ import annotations

import inspect
import json

from ..judge import draws as rules
from ..judge.records import Finding
from ..run.records import CallSpec
from . import parts

# Arguments left at their schema defaults when the record could not name them: they pick where and how the draw is
# made, not what may be drawn.
DEFAULTED = frozenset({"generator", "layout", "device", "pin_memory", "memory_format", "dtype"})


def why_not(finding: Finding) -> str:
    """Why no draws script can be written ("" when one can)."""
    record = json.loads(finding.data) if finding.data else {}
    if not record:
        return "the finding does not record which overload drew"
    left = [name for name in record.get("unknown", ()) if name not in DEFAULTED]
    if left:
        return f"{record['op']}'s argument(s) {', '.join(left)} are not a tensor of the call nor a plain number"
    return ""


def draws_script(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    record = json.loads(finding.data)
    op, tensors, numbers = record["op"], record["tensors"], record["numbers"]
    _, packet, overload = op.split(".")
    constants = [
        f"OP = {op!r}  # the overload that drew, called directly",
        f"RULE = {record.get('rule', op)!r}  # the overload whose rule judges the draw (OP's functional sibling)",
        f"TENSORS = {tensors!r}  # its tensor arguments: which tensor of the call each is",
        f"NUMBERS = {numbers!r}  # its other arguments",
        f"SIGMAS = {rules.SIGMAS!r}",
    ]
    lines = parts.preamble(finding, call, torch_version, (), constants)
    lines += ["", "", *_rule_source()]
    lines += parts.tensors_function(call)
    lines += [
        "", "", "def main():",
        "    T = tensors()",
        f"    print({('torchsleuth repro: ' + op + ' must draw what its parameters allow')!r})",
        "    describe(T)",
        "    params = {name: T[path] for name, path in TENSORS.items()}",
        "    params.update(NUMBERS)",
        "    torch.manual_seed(CALL_SEED)",
        f"    result = torch.ops.aten.{packet}.{overload}(**params)",
        "    wrong = ruled_out(RULE, params, result)",
        "    if wrong:",
        '        print(f"{wrong[1]} of {wrong[2]} element(s) are {wrong[0]}")',
    ]
    lines += parts.verdict("wrong", "every draw is one its parameters allow")
    return lines + parts.data_block(call) + parts.footer()


def _rule_source() -> list[str]:
    text = "\n\n".join(inspect.getsource(function).rstrip("\n") for function in rules.SOURCES)
    return text.replace("\n\n\n", "\n\n").split("\n")
