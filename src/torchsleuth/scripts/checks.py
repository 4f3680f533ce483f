"""The generic script: the check a finding of the references and contracts gets.

Design note. What ``main`` checks follows the finding, not the variant alone
(``check_of`` picks one of ``CHECKS``):

* ``layout``, ``precision``, ``device``: the call against the same call on
  contiguous copies (the functional counterpart for in-place and ``out=``
  calls), on the CPU in float64 (rounded back to the actual dtype), or on the
  CPU in the same dtype. Elementwise ``|a - e| <= atol + rtol * |e|`` with the
  finding's atol and rtol, NaN matching NaN; integers and bools exactly. A
  finding about metadata (shape, dtype, structure) checks only metadata, so a
  random or uninitialized op is not judged by values it may legitimately vary.
* ``determinism``: the call twice on fresh tensors, bit for bit.
* ``contract``: the storage before and after the call (writes outside the
  view, an input changed), strides and identity of a written tensor, or the
  two prefilled runs of a random in-place op (elements never drawn), or the
  support of the distribution (values it cannot produce: scripts.support),
  or a random op's kernel called with the case's tensors against what its
  parameters allow (scripts.draws).
* ``isolation`` (crash, hang): the call in a child process of the script;
  where the case's own steps are the ladder's (scripts.steps: any case of
  the references and contracts, the autodiff oracle's), the ladder: the
  call, the derivatives the case took, each under a dispatch mode too.
* ``refusal`` (``unchecked_input``): the call on the CPU, which must raise,
  then on the device, which must raise too (an error, or a device-side
  assert at the synchronization after it).

The tolerance is the table's atol and rtol only: the judge may have widened
it by the op's measured sensitivity, so a script can be stricter than the
sweep was. The header gives what was allowed at the worst element.

Exit status: 1 while the bug is present, 0 once it is gone, 2 when the
check cannot be made (no call was recorded, or the call now raises).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..judge.records import Finding
from ..run.call import prefills
from ..run.records import CallSpec
from . import draws, parts, steps
from .kit import HANG_SECONDS
from .support import SUPPORT, method, support

# Mismatch attributes that are about metadata: only metadata is rechecked.
METADATA = frozenset({"shape", "dtype", "structure", "type", "layout"})


def generic_script(finding: Finding, torch_version: str, imports: tuple[str, ...] = ()) -> str:
    """The script for a finding of the references and contracts: exits 1 while it is wrong; ``imports``: what the
    run imported first (``--import``), which the script imports first too."""
    why = why_not(finding)
    if why:
        return parts.no_repro(finding, torch_version, why)
    assert finding.call is not None
    return "\n".join(parts.importing(CHECKS[check_of(finding)](finding, finding.call, torch_version), imports))


def check_of(finding: Finding) -> str:
    """Which of ``CHECKS`` the finding gets ("" when none applies)."""
    attribute = finding.mismatch.attribute if finding.mismatch else ""
    if finding.reference in ("layout", "precision", "device"):
        return "metadata" if attribute in METADATA else "values"
    if finding.reference == "determinism":
        return "determinism"
    if finding.reference == "isolation":
        return "isolation"
    if finding.kind == "unchecked_input":
        return "refusal"
    if attribute == "stride":
        return "strides"
    if attribute == "identity":
        return "identity"
    if finding.kind in ("out_of_view_write", "input_mutated"):
        return finding.kind
    if finding.kind == "random_coverage":
        return "draws" if attribute == "draws" else "coverage" if finding.mismatch else "support"
    return ""


def why_not(finding: Finding) -> str:
    """Why no check can be written for ``finding`` ("" when one can)."""
    call = finding.call
    if finding.kind == "invariant":
        return ("an invariant of a training step (a parameter or the optimizer's state) is no single call; "
                "the op findings of the same watch, if any, name the call and have repro scripts")
    if call is None:
        return (
            "the call was not recorded (a crash or hang is seen from outside the worker, before its "
            f"tensors are described); rerun the case {finding.case_id!r} to get one"
        )
    if check_of(finding) == "draws":  # the overload is called directly: no public name nor argument source is needed
        return draws.why_not(finding)
    if call.why_not:
        return call.why_not
    if not call.function:
        return "the op has no public name to call it by"
    if not check_of(finding):
        return f"a {finding.kind} finding judged against the {finding.reference} reference has no automated check yet"
    if check_of(finding) == "support" and method(finding) not in SUPPORT:
        return f"no support check is known for {finding.op}"
    return ""


def _literal(value) -> str:
    """``value`` as Python source (a NaN has no literal)."""
    return "float('nan')" if isinstance(value, float) and math.isnan(value) else repr(value)


# --- the checks ---------------------------------------------------------------------------------


def values(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    metadata = check_of(finding) == "metadata"
    helpers = ("leaves", "copies", "compare") + (("gradients",) if call.variant == "backward" else ())
    lines = parts.preamble(finding, call, torch_version, helpers, parts.tolerance_lines(finding) + parts.constants(call))
    lines += parts.function_lines(call, parts.reference_source(finding, call))
    lines += parts.tensors_function(call)
    copies = {"layout": "copies(tensors())", "device": "copies(tensors(), device='cpu')",
              "precision": "copies(tensors(), device='cpu', wide=True)"}[finding.reference]
    lines += parts.start_main(call, f"{finding.variant} call against {finding.reference} reference ({'metadata' if metadata else 'values'})")
    lines += parts.actual_lines(call)
    lines.append(f"    R = {copies}")
    if call.variant == "backward":
        lines += ["    torch.manual_seed(CALL_SEED)", "    expected = leaves(gradients(reference, R))"]
    else:
        lines += ["    torch.manual_seed(CALL_SEED)", "    expected = leaves(reference(R))"]
    if finding.reference == "precision":
        lines.append("    expected = [(p, e.to(a.dtype) if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor) else e) "
                     "for (p, e), (_, a) in zip(expected, actual)]")
    cast = call.variant == "inplace"  # self keeps its dtype whatever the functional result's is
    if finding.kind == "dropped_write":
        lines += [
            "    before = tensors()",
            "    for path, t in actual:",
            "        kept = same_bits(t, before[path])",
            '        print(f"{path}: {int(kept.sum())} of {t.numel()} element(s) kept their value from before the call")',
        ]
    lines.append(f"    agreed = compare(actual, expected, values={not metadata}, cast={cast})")
    lines += parts.verdict("not agreed", "the call agrees with its reference")
    return lines + parts.data_block(call) + parts.footer()


def determinism(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    helpers = ("leaves", "compare") + (("gradients",) if call.variant == "backward" else ())
    lines = parts.preamble(finding, call, torch_version, helpers, parts.tolerance_lines(finding, bitwise=True) + parts.constants(call))
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    lines += [
        "", "",
        "def once():",
        '    """The call on fresh tensors, seeded: what it produced, copied."""',
        "    T = tensors()",
    ]
    lines += parts.actual_lines(call)
    lines.append("    return [(p, v.detach().clone() if isinstance(v, torch.Tensor) else v) for p, v in actual]")
    lines += parts.start_main(call, "the same call twice, bit for bit")
    lines += ["    first, second = once(), once()", "    agreed = compare(second, first, bitwise=True)"]
    lines += parts.verdict("not agreed", "the same call gives the same bits twice")
    return lines + parts.data_block(call) + parts.footer()


def storage(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    """out_of_view_write and input_mutated: the storage before and after the call."""
    outside = finding.kind == "out_of_view_write"
    path = finding.mismatch.path if finding.mismatch else ""
    specs = [s for s in call.tensors if s.path == path] or list(call.tensors)
    views = ", ".join(f"{s.path!r}: ({s.storage_numel}, {tuple(s.shape)!r}, {tuple(s.stride)!r}, {s.storage_offset})" for s in specs)
    constants = [f"VIEWS = {{{views}}}  # path: (storage elements, shape, stride, offset) before the call"]
    lines = parts.preamble(finding, call, torch_version, ("storage_bytes", "view_mask"), constants)
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    what = "elements outside each view must keep their bytes" if outside else "an input the call only reads must keep its values"
    lines += parts.start_main(call, what)
    lines += [
        "    before = {path: storage_bytes(T[path]) for path in VIEWS}",
        "    torch.manual_seed(CALL_SEED)",
        "    call(T)",
        "    found = 0",
        "    for path, (numel, shape, stride, offset) in VIEWS.items():",
        "        after = storage_bytes(T[path])",
        "        if after.shape != before[path].shape:",
        '            print(f"{path}: the storage was replaced ({before[path].shape[0]} -> {after.shape[0]} elements)")',
        "            continue",
        "        changed = (after != before[path]).any(-1)",
        f"        bad = changed & {'~' if outside else ''}view_mask(numel, shape, stride, offset)",
        "        found += int(bad.sum())",
        "        where = [int(i) for i in bad.nonzero().reshape(-1)[:8]]",
        (f'        print(f"{{path}}: {{int(bad.sum())}} storage element(s) {"outside" if outside else "inside"} the view changed, '
         'at storage indices {where}")'),
    ]
    lines += parts.verdict("found", "no element changed that should not have")
    return lines + parts.data_block(call) + parts.footer()


def strides(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    lines = parts.preamble(finding, call, torch_version, (), parts.constants(call))
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    lines += parts.start_main(call, "a written tensor must keep its shape, strides and offset")
    lines += [
        "    before = {path: (tuple(T[path].shape), T[path].stride(), T[path].storage_offset()) for path in WRITTEN}",
        "    torch.manual_seed(CALL_SEED)",
        "    call(T)",
        "    moved = 0",
        "    for path in WRITTEN:",
        "        after = (tuple(T[path].shape), T[path].stride(), T[path].storage_offset())",
        '        print(f"{path}: (shape, stride, offset) {before[path]} before the call, {after} after")',
        "        moved += after != before[path]",
    ]
    lines += parts.verdict("moved", "every written tensor kept its layout")
    return lines + parts.data_block(call) + parts.footer()


def identity(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    lines = parts.preamble(finding, call, torch_version, ("leaves",), parts.constants(call))
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    lines += parts.start_main(call, "the call must return the tensors it wrote")
    lines += [
        "    torch.manual_seed(CALL_SEED)",
        "    returned = [v for _, v in leaves(call(T)) if isinstance(v, torch.Tensor)]",
        "    wrong = 0",
        "    for path, r in zip(WRITTEN, returned):",
        "        same = r.untyped_storage().data_ptr() == T[path].untyped_storage().data_ptr()",
        '        print(f"{path}: returned {\'the same tensor\' if same else \'a different tensor\'}")',
        "        wrong += not same",
    ]
    lines += parts.verdict("wrong", "the call returns the tensors it wrote")
    return lines + parts.data_block(call) + parts.footer()


def coverage(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    first, second = prefills(getattr(torch, finding.dtype))  # the fills of the engine's two runs
    constants = parts.constants(call) + [f"FILLS = ({_literal(first)}, {_literal(second)})  # self is filled with each before one of two seeded runs"]
    lines = parts.preamble(finding, call, torch_version, ("same_bits",), constants)
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    lines += parts.start_main(call, "a random in-place op must draw every element of self")
    lines += [
        "    runs = []",
        "    for fill in FILLS:",
        "        T = tensors()",
        "        with torch.no_grad():",
        "            for path in WRITTEN:",
        "                T[path].fill_(fill)",
        "        torch.manual_seed(CALL_SEED)",
        "        call(T)",
        "        runs.append({path: T[path].detach().cpu().clone() for path in WRITTEN})",
        "    kept = 0",
        "    for path in WRITTEN:",
        "        first, second = runs[0][path], runs[1][path]",
        "        unwritten = same_bits(first, torch.full_like(first, FILLS[0])) & same_bits(second, torch.full_like(second, FILLS[1]))",
        "        unwritten = unwritten.reshape(first.shape)",
        "        where = [[int(i) for i in index] for index in unwritten.nonzero()[:8]]",
        '        print(f"{path}: {int(unwritten.sum())} of {first.numel()} element(s) kept their fill in both runs, at {where}")',
        "        kept += int(unwritten.sum())",
    ]
    lines += parts.verdict("kept", "every element of self was drawn")
    return lines + parts.data_block(call) + parts.footer()


def isolation(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    if steps.derivatives(finding) is not None:  # the case's own steps: the call under the sweep's trace, its derivatives
        return steps.lines(finding, call, torch_version)
    constants = [f"HANG_SECONDS = {HANG_SECONDS!r}  # a child still running after this hangs"]
    lines = parts.preamble(finding, call, torch_version, (), constants, imports=("os", "subprocess"))
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    lines += parts.start_main(call, f"the call must return (it was seen to {'crash' if finding.kind == 'crash' else 'hang'})")
    lines += [
        '    if os.environ.get("TORCHSLEUTH_REPRO_CHILD"):  # the child: make the call',
        "        torch.manual_seed(CALL_SEED)",
        "        call(T)",
        "        return 0",
        "    # the parent: a crash kills only the child, so it can be told apart from an error",
        '    env = dict(os.environ, TORCHSLEUTH_REPRO_CHILD="1")',
        "    try:",
        "        child = subprocess.run([sys.executable, __file__], env=env, timeout=HANG_SECONDS)",
        "    except subprocess.TimeoutExpired:",
        '        print(f"BUG PRESENT: the call still runs after {HANG_SECONDS} s:", SUMMARY)',
        "        return 1",
        "    if child.returncode in (0, 2):  # returned, or raised (loud, so not this bug)",
        '        print("OK: the call returns" if child.returncode == 0 else "CANNOT CHECK: the call raised")',
        "        return child.returncode",
        '    print(f"BUG PRESENT: the call crashed the process (exit status {child.returncode}):", SUMMARY)',
        "    return 1",
    ]
    return lines + parts.data_block(call) + parts.footer()


def refusal(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    lines = parts.preamble(finding, call, torch_version, ("copies",), [])
    source, what = parts.reference_source(dataclasses.replace(finding, reference="device"), call)
    lines += parts.function_lines(call, (source, what))
    lines += parts.tensors_function(call)
    lines += parts.start_main(call, f"{finding.device} must refuse the values the CPU refuses")
    lines += [
        "    try:",
        "        reference(copies(tensors(), device='cpu'))",
        "    except Exception as e:",
        '        print("the CPU refuses it:", str(e).strip().splitlines()[0])',
        "    else:",
        '        print("CANNOT CHECK: the CPU takes these values now")',
        "        return 2",
        "    device = next(t.device for t in T.values())",
        "    try:",
        "        torch.manual_seed(CALL_SEED)",
        "        call(T)",
        "        if device.type != 'cpu':",
        "            getattr(torch, device.type).synchronize()  # a device-side assert shows here",
        "    except Exception as e:",
        '        print(f"OK: {device} refuses it too:", str(e).strip().splitlines()[0])',
        "        return 0",
        '    print("BUG PRESENT:", SUMMARY)',
        "    return 1",
    ]
    return lines + parts.data_block(call) + parts.footer()


# Check name (check_of) -> the writer of its script's lines: (finding, call, torch_version) -> list[str].
CHECKS = {
    "values": values,
    "metadata": values,
    "determinism": determinism,
    "out_of_view_write": storage,
    "input_mutated": storage,
    "strides": strides,
    "identity": identity,
    "coverage": coverage,
    "support": support,
    "draws": draws.draws_script,
    "isolation": isolation,
    "refusal": refusal,
}
