"""The repro script of a ``compile`` finding: eager, compiled, eager again, and global state around them.

Design note. The script rebuilds the call's tensors exactly (the repro
kit's parts, torchsleuth.scripts), reads a fingerprint of global state, runs
the call eagerly, through ``torch.compile(backend="inductor",
fullgraph=True, dynamic=False)`` (with inductor's on-disk caches off, as the
oracle compiles), reads the fingerprint again and runs the call eagerly once
more. It prints all three comparisons
and exits by the one the finding is about (``ASPECT``, read with the rest
from the finding's ``Detail`` record, detail.py): the compiled result
against eager within ``ATOL``/``RTOL`` (the table's; the sweep may have
allowed more), eager after against eager before bit for bit, or the
fingerprint. The run's ``--import`` modules are imported first.

Exit status: 1 while the bug is present, 0 once it is gone, 2 when it cannot
be checked (the call or the compile raises).

A finding of the compiled variant (a case ``compile:static`` or
``compile:dynamic``) gets the generic script of its check (scripts.checks)
with the call under test compiled as the sweep compiled it: plain torch and
``torch.compile``, its reference still eager.
"""

from __future__ import annotations


from ...cases.records import Case
from ...judge.records import Finding
from ...scripts import parts
from ...scripts.checks import generic_script
from .detail import AFTER, COMPILED, DYNAMIC, STATE, STATIC, Detail

_MAIN = '''


def state():
    """Global flags that change eager results (flush-denormal mode by a probe: torch has no getter)."""
    probes = {{
        "flush_denormal": lambda: (torch.tensor([1e-39]) * torch.tensor([1.0])).item() == 0.0,
        "default_dtype": torch.get_default_dtype,
        "num_threads": torch.get_num_threads,
        "deterministic_algorithms": lambda: (torch.are_deterministic_algorithms_enabled(),
                                             torch.is_deterministic_algorithms_warn_only_enabled()),
        "grad_enabled": torch.is_grad_enabled,
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "mkldnn.enabled": lambda: torch.backends.mkldnn.enabled,
        "cudnn.enabled": lambda: torch.backends.cudnn.enabled,
        "cudnn.benchmark": lambda: torch.backends.cudnn.benchmark,
        "cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
        "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "default_device": lambda: str(torch.get_default_device()),
    }}
    found = {{}}
    for name, read in probes.items():
        try:
            found[name] = read()
        except Exception:
            pass
    return found


def without_disk_caches():
    """Inductor's on-disk caches off: a cache hit would skip what the compile does."""
    import torch._inductor.config as inductor_config
    if hasattr(inductor_config, "fx_graph_cache"):
        inductor_config.fx_graph_cache = False
    try:
        import torch._functorch.config as functorch_config
        if hasattr(functorch_config, "enable_autograd_cache"):
            functorch_config.enable_autograd_cache = False
    except ImportError:
        pass


def main():
    load_imports()
    without_disk_caches()
    print("torchsleuth repro: eager, torch.compile (inductor), eager again; global state around them")
    print({call_line!r})
    describe(tensors())
    state_before = state()
    torch.manual_seed(CALL_SEED)
    before = leaves(call(tensors()))
    compiled_call = torch.compile(call, backend="inductor", fullgraph=True, dynamic=False)
    torch.manual_seed(CALL_SEED)
    compiled = leaves(compiled_call(tensors()))
    state_after = state()
    torch.manual_seed(CALL_SEED)
    after = leaves(call(tensors()))
    changed = {{name: (value, state_after.get(name)) for name, value in state_before.items() if state_after.get(name) != value}}
    print("global state:", "unchanged" if not changed else "; ".join(f"{{n}} {{a}} -> {{b}}" for n, (a, b) in changed.items()))
    print("eager after the compile against eager before, bit for bit:")
    same_after = compare(after, before, bitwise=True)
    print("compiled against eager:")
    agreed = compare(compiled, before, values=VALUES)
    wrong = {{"state": bool(changed), "after": not same_after, "compiled": not agreed}}[ASPECT]
{verdict}
'''

# What the script says once the bug is gone, per aspect.
_FIXED = {
    STATE: "compiling leaves global state as it was",
    AFTER: "eager gives the same bits after the compile",
    COMPILED: "the compiled call agrees with eager",
}


_COMPILED_CALL = """

# the call under test compiled as the sweep compiled it, inductor's on-disk caches off (a hit would skip the lowering)
import torch._inductor.config as inductor_config  # noqa: E402
if hasattr(inductor_config, "fx_graph_cache"):
    inductor_config.fx_graph_cache = False
call = torch.compile(call, backend="inductor", fullgraph=True, dynamic={dynamic})
"""


# A storage-defined op's check (scripts.checks.determinism) runs the call twice on copies of one storage: compiled,
# the first run is eager's, the reference the sweep compared the compiled call with.
_TWICE = "    first, second = once(), once()"
_EAGER_FIRST = """    compiled_call = globals()["call"]
    globals()["call"] = eager_call
    first = once()  # eager, on a copy of the storage: the reference
    globals()["call"] = compiled_call
    second = once()  # compiled, on another copy of the same storage"""


def compiled_variant(finding: Finding, torch_version: str, dynamic: bool) -> str:
    """The generic script of a compiled-variant finding, its ``call`` compiled (the reference stays eager)."""
    text = generic_script(finding, torch_version)
    at = text.find("\ndef call(T):")
    end = text.find("\n\n", at + 1) if at >= 0 else -1
    if end < 0:  # no call to compile: the generic script says why
        return text
    if finding.reference != "determinism":
        return text[:end + 1] + _COMPILED_CALL.format(dynamic=dynamic) + text[end + 1:]
    text = text[:end + 1] + "eager_call = call  # the reference, kept before call is compiled\n" + _COMPILED_CALL.format(dynamic=dynamic) + text[end + 1:]
    return (text.replace(_TWICE, _EAGER_FIRST).replace("the same call twice, bit for bit", "eager, then compiled, on copies of one storage, bit for bit")
            .replace("the same call gives the same bits twice", "compiled and eager agree on copies of one storage"))


def script(finding: Finding, torch_version: str) -> str | None:
    """The script of one compile finding, or None when its call cannot be written (the generic script says why)."""
    oracle = Case.parse(finding.case_id).oracle
    if oracle in (STATIC, DYNAMIC):
        return compiled_variant(finding, torch_version, oracle == DYNAMIC)
    call, detail, answer = parts.recorded(finding, Detail, torch_version, "the check it failed")
    if detail is None:
        return answer
    atol, rtol = parts.tolerance(finding, from_mismatch=detail.aspect == COMPILED)
    constants = [
        f"ASPECT = {detail.aspect!r}  # which check the finding failed: compiled, after (eager rerun) or state",
        f"VALUES = {detail.values_compared!r}  # False: compiled against eager by metadata only (random ops, uninitialized results)",
        f"IMPORTS = {detail.imports!r}  # what the sweep imported first (--import); edit if they moved",
        f"ATOL, RTOL = {atol!r}, {rtol!r}  # compiled against eager: |a - e| <= ATOL + RTOL * |e| (the table's)",
    ]
    lines = parts.preamble(finding, call, torch_version, ("leaves", "compare", "load_imports"), constants)
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    verdict = "\n".join(parts.verdict("wrong", _FIXED[detail.aspect]))
    lines.append(_MAIN.format(call_line="call: " + parts.call_source(call), verdict=verdict).rstrip("\n"))
    return "\n".join(lines + parts.data_block(call) + parts.footer())
