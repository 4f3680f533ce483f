"""The repro script of a ``capability`` finding: the call under each CPU capability, compared.

Design note. The script rebuilds the call's tensors exactly as the generic
scripts do (the repro kit's parts, torchsleuth.scripts), then runs itself
once per capability as a child process with ``ATEN_CPU_CAPABILITY`` set (the
variable is read when torch first dispatches, so only a fresh process can
change it). Each child writes the capability it really ran under and the
result's leaves to a file; the parent compares every capability with the
reference one by the oracle's policy: a change of class (NaN, infinities:
``judge.values.class_change``, copied in) or of an integer, or a difference
beyond ``|a - e| <= ATOL + RTOL * |e|``. The tolerance is the dtype's table
entry, without the sensitivity term the sweep may have added, so the script
can be stricter than the sweep; a child that dies or hangs where the
reference returns is the bug too.

What was compared (the capabilities, the reference, the thread count, the
run's ``--import`` modules, imported in every child: edit ``IMPORTS`` if they
moved) comes from the finding's ``Detail`` record (detail.py), never from its
prose.

Exit status: 1 while the capabilities disagree, 0 once they agree, 2 when it
cannot be checked (a capability this CPU lacks, the reference raises).
"""

from __future__ import annotations

import inspect


from ...judge import values
from ...judge.records import Finding
from ...scripts import HANG_SECONDS, parts
from .detail import Detail
from .peers import capability_name

# torchsleuth's own functions the script holds, copied as they are.
_COPIED = (capability_name, values.value_classes, values.class_change)

_MAIN = '''


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
        changed = class_change(a, e, signed_zero=False)
        bad = changed | (torch.isfinite(e.to(work)) & ~(diff <= allowed) & ~(torch.isnan(a) & torch.isnan(e)))
    else:
        diff = (a.to(torch.float64) - e.to(torch.float64)).abs()
        allowed, changed, bad = torch.zeros_like(diff), torch.zeros_like(diff, dtype=torch.bool), a != e
    print(f"{{where}}: {{int(bad.sum())}} of {{a.numel()}} element(s) differ from {{REFERENCE}} beyond tolerance "
          f"({{int(changed.sum())}} change class); {{a.numel() - int(same_bits(a, e).sum())}} differ in any bit")
    if bool(bad.any()):
        flat = int(bad.reshape(-1).to(torch.uint8).argmax())
        index = [int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)] if a.dim() else []
        worst = float(torch.nan_to_num(diff.reshape(-1)[flat], nan=float('inf')))
        print(f"  first at {{index}}: {{fmt(a.reshape(-1)[flat])}} under {{capability}}, {{fmt(e.reshape(-1)[flat])}} under {{REFERENCE}}; "
              f"|diff| {{worst:.6g}}, allowed {{float(allowed.reshape(-1)[flat]):.6g}}")
    return bool(bad.any())


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


def script(finding: Finding, torch_version: str) -> str | None:
    """The script of one capability finding, or None when its call cannot be written (the generic script says why)."""
    call, detail, answer = parts.recorded(finding, Detail, torch_version, "the capabilities compared")
    if detail is None:
        return answer
    atol, rtol = parts.tolerance(finding)
    constants = [
        f"CAPABILITIES = {detail.capabilities!r}  # each run in a child process with ATEN_CPU_CAPABILITY set",
        f"REFERENCE = {detail.reference!r}  # the one the others are compared with",
        f"THREADS = {detail.threads!r}  # intra-op threads, as in the sweep (a reduction's order depends on them)",
        f"IMPORTS = {detail.imports!r}  # what the sweep imported first (--import); edit if they moved",
        f"HANG_SECONDS = {HANG_SECONDS!r}  # a child still running after this long hangs",
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # |a - e| <= ATOL + RTOL * |e| (the table; the sweep may have allowed more)",
    ] + parts.constants(call)
    helpers = ("leaves", "load_imports", "same_bits", "fmt") + (("gradients",) if call.variant == "backward" else ())
    lines = parts.preamble(finding, call, torch_version, helpers, constants, imports=("os", "subprocess", "tempfile"))
    lines += ["", "", "\n\n\n".join(inspect.getsource(function).rstrip("\n") for function in _COPIED)]
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    run = "gradients(call, T)" if call.variant == "backward" else "call(T)"
    verdict = "\n".join(parts.verdict("wrong", "every capability agrees with " + detail.reference))
    lines.append(_MAIN.format(run=run, call_line="call: " + parts.call_source(call), verdict=verdict).rstrip("\n"))
    return "\n".join(lines + parts.data_block(call) + parts.footer())
