"""The repro script of a ``capability`` finding: the call under each CPU capability, compared.

Design note. The script rebuilds the call's tensors exactly as the generic
scripts do (report/repro.py's blocks), then runs itself once per capability
as a child process with ``ATEN_CPU_CAPABILITY`` set (the variable is read
when torch first dispatches, so only a fresh process can change it). Each
child writes the capability it really ran under and the result's leaves to
a file; the parent compares every capability with the reference one by the
oracle's policy: a change of class (NaN, infinities) or of an integer, or a
difference beyond ``|a - e| <= ATOL + RTOL * |e|``. The tolerance is the
dtype's table entry, without the sensitivity term the sweep may have added,
so the script can be stricter than the sweep; a child that dies or hangs
where the reference returns is the bug too. The run's ``--import`` modules
are imported in every child (edit ``IMPORTS`` if they moved).

Exit status: 1 while the capabilities disagree, 0 once they agree, 2 when it
cannot be checked (a capability this CPU lacks, the reference raises).
"""

from __future__ import annotations

import re

import torch

from ..judge.records import Finding
from ..judge.tolerance import table
from ..report import repro as generic

# Seconds a child may run before it is said to hang.
HANG_SECONDS = 60.0

_MAIN = '''


def capability_name(reported):
    return {{"NO AVX": "default", "Z VECTOR": "zvector"}}.get(reported, reported.lower())


def result_here():
    """The call under this process's capability, as (path, value) leaves."""
    torch.set_num_threads(THREADS)
    T = tensors()
    torch.manual_seed(CALL_SEED)
    value = {run}
    return [(p, v.detach() if isinstance(v, torch.Tensor) else v) for p, v in leaves(value)]


def under(capability):
    """(result, "") from a child process run under ``capability``, or (None, why not)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "result.pt")
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, TORCHSLEUTH_REPRO_CHILD=path)
        try:
            child = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            return None, f"the call still runs after {{HANG_SECONDS}} s"
        if child.returncode == 2:
            return None, "raised"
        if child.returncode != 0 or not os.path.exists(path):
            return None, f"the process died (exit status {{child.returncode}})"
        ran_under, result = torch.load(path, weights_only=False)
        if capability_name(ran_under) != capability:
            return None, f"not supported: asked for {{capability}}, the process ran {{ran_under}}"
        return result, ""


def classes(t):
    """0 finite, 1 NaN, 2 +inf, 3 -inf, per element (complex: both parts)."""
    t = torch.view_as_real(t.resolve_conj()) if t.is_complex() else t
    return torch.isnan(t).to(torch.int8) + 2 * (t == float("inf")).to(torch.int8) + 3 * (t == float("-inf")).to(torch.int8)


def differs(path, a, e, capability):
    """Prints how ``a`` (under ``capability``) differs from ``e`` (under REFERENCE); True if it does."""
    where = f"{{path}} under {{capability}}"
    if not isinstance(a, torch.Tensor) or not isinstance(e, torch.Tensor):
        if a != e:
            print(f"{{where}}: {{a!r}}, under {{REFERENCE}}: {{e!r}}")
        return a != e
    if a.shape != e.shape or a.dtype != e.dtype:
        print(f"{{where}}: shape {{list(a.shape)}} {{a.dtype}}, under {{REFERENCE}}: {{list(e.shape)}} {{e.dtype}}")
        return True
    a, e = a.cpu().resolve_conj().resolve_neg(), e.cpu().resolve_conj().resolve_neg()
    if a.layout != torch.strided:
        a, e = a.to_dense(), e.to_dense()
    inexact = a.dtype.is_floating_point or a.dtype.is_complex
    if inexact:
        work = torch.complex128 if a.is_complex() else torch.float64
        diff = (a.to(work) - e.to(work)).abs()
        allowed = ATOL + RTOL * e.to(work).abs()
        changed = (classes(a) != classes(e))
        changed = changed.any(-1) if a.is_complex() else changed
        bad = changed | (torch.isfinite(e.to(work)) & ~(diff <= allowed) & ~(torch.isnan(a) & torch.isnan(e)))
    else:
        diff = (a.to(torch.float64) - e.to(torch.float64)).abs()
        allowed, changed, bad = torch.zeros_like(diff), torch.zeros_like(diff, dtype=torch.bool), a != e
    same_bits = int((a.reshape(-1).contiguous().view(torch.uint8).reshape(a.numel(), -1)
                     == e.reshape(-1).contiguous().view(torch.uint8).reshape(e.numel(), -1)).all(-1).sum()) if a.numel() and a.dtype != torch.bool else int((a == e).sum())
    print(f"{{where}}: {{int(bad.sum())}} of {{a.numel()}} element(s) differ from {{REFERENCE}} beyond tolerance "
          f"({{int(changed.sum())}} change class); {{a.numel() - same_bits}} differ in any bit")
    if bool(bad.any()):
        flat = int(bad.reshape(-1).to(torch.uint8).argmax())
        index = [int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)] if a.dim() else []
        print(f"  first at {{index}}: {{fmt(a.reshape(-1)[flat])}} under {{capability}}, {{fmt(e.reshape(-1)[flat])}} under {{REFERENCE}}; "
              f"|diff| {{float(torch.nan_to_num(diff.reshape(-1)[flat], nan=float('inf'))):.6g}}, allowed {{float(allowed.reshape(-1)[flat]):.6g}}")
    return bool(bad.any())


def fmt(x):
    value = x.item()
    if isinstance(value, complex):
        return f"{{value.real:.7g}}{{value.imag:+.7g}}j"
    return f"{{value:.7g}}" if isinstance(value, float) else str(value)


def main():
    load_imports()
    child = os.environ.get("TORCHSLEUTH_REPRO_CHILD")
    if child:  # a child: make the call under the capability it was started with
        torch.save((torch.backends.cpu.get_cpu_capability(), result_here()), child)
        return 0
    print("torchsleuth repro: the same call under each CPU capability, compared with " + REFERENCE)
    print({call_line!r})
    describe(tensors())
    results, failed = {{}}, {{}}
    for capability in CAPABILITIES:
        result, why = under(capability)
        if result is None and (capability == REFERENCE or why.startswith("not supported")):
            print(f"CANNOT CHECK: under {{capability}}: {{why}}")
            return 2
        if result is None:
            failed[capability] = why
        else:
            results[capability] = result
    wrong = False
    for capability in CAPABILITIES:
        if capability == REFERENCE:
            continue
        if capability in failed:
            print(f"under {{capability}}: {{failed[capability]}}; under {{REFERENCE}} the call returns")
            wrong |= failed[capability] != "raised"  # a raise is loud: not this bug
            continue
        mine, theirs = results[capability], results[REFERENCE]
        if [p for p, _ in mine] != [p for p, _ in theirs]:
            print(f"under {{capability}}: result paths {{[p for p, _ in mine]}}, under {{REFERENCE}}: {{[p for p, _ in theirs]}}")
            wrong = True
            continue
        for (path, a), (_, e) in zip(mine, theirs):
            wrong |= differs(path, a, e, capability)
{verdict}
'''


def script(finding: Finding, torch_version: str) -> str:
    call = finding.call
    if call is None or call.why_not or not call.function:
        why = call.why_not if call is not None and call.why_not else "the call was not recorded or has no public name"
        return generic._no_repro(finding, torch_version, why)
    capabilities, reference, threads = _compared(finding)
    imports = tuple(re.search(r"--import (.+)$", finding.detail).group(1).split()) if "--import " in finding.detail else ()
    m = finding.mismatch
    if m is not None and m.attribute == "values":
        atol, rtol = m.atol, m.rtol
    else:
        tolerance = table(getattr(torch, finding.dtype))
        atol, rtol = tolerance.atol, tolerance.rtol
    constants = [
        f"CAPABILITIES = {capabilities!r}  # each run in a child process with ATEN_CPU_CAPABILITY set",
        f"REFERENCE = {reference!r}  # the one the others are compared with",
        f"THREADS = {threads!r}  # intra-op threads, as in the sweep (a reduction's order depends on them)",
        f"IMPORTS = {imports!r}  # what the sweep imported first (--import); edit if they moved",
        f"HANG_SECONDS = {HANG_SECONDS!r}",
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # |a - e| <= ATOL + RTOL * |e| (the table; the sweep may have allowed more)",
    ] + generic._constants(call)
    helpers = ("leaves", "load_imports") + (("gradients",) if call.variant == "backward" else ())
    lines = generic._preamble(finding, call, torch_version, helpers, constants,
                              imports=("importlib", "os", "runpy", "subprocess", "tempfile"))
    lines += generic._function_lines(call)
    lines += generic._tensors_function(call)
    run = "gradients(call, T)" if call.variant == "backward" else "call(T)"
    verdict = "\n".join(generic._verdict("wrong", "every capability agrees with " + reference))
    lines.append(_MAIN.format(run=run, call_line="call: " + generic._call_source(call), verdict=verdict).rstrip("\n"))
    return "\n".join(lines + generic._data_block(call) + generic._footer())


def _compared(finding: Finding) -> tuple[tuple[str, ...], str, int]:
    """The capabilities, the reference and the thread count, from the finding's case and detail."""
    from .capability import _of
    from ..cases.records import Case

    capabilities = _of(Case.parse(finding.case_id))
    found = re.search(r"expected: the result under (\w+);", finding.detail)
    ran = re.search(r"the worker ran (\w+), (\d+) thread", finding.detail)
    reference = found.group(1) if found else (ran.group(1) if ran else capabilities[-1])
    threads = int(ran.group(2)) if ran else 1
    return capabilities, reference, threads
