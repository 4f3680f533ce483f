"""The support check: a random in-place op must draw only values its distribution can produce.

Design note. For each random in-place method the table below names its
parameters, their defaults, and the condition (over ``v``, the values as
float64) no draw may meet. The parameters are read from the call as the
finding recorded it (literals only: a tensor argument gives no bound), so
the script checks the same distribution the sweep drew from.
"""

from __future__ import annotations

import ast

from ..judge.records import Finding
from ..run.records import CallSpec
from . import parts

# Support of each random in-place method: parameter names, defaults, and the
# condition (over ``v``, the values as float64) that no draw may meet.
SUPPORT: dict[str, tuple[tuple[str, ...], tuple, str]] = {
    "uniform_": (("from", "to"), (0.0, 1.0), "(v < {from}) | (v > {to})"),
    "normal_": (("mean", "std"), (0.0, 1.0), "torch.isinf(v)"),
    "exponential_": (("lambd",), (1.0,), "v < 0"),
    "geometric_": (("p",), (None,), "(v < 1) | (v != torch.floor(v))"),
    "log_normal_": (("mean", "std"), (1.0, 2.0), "v < 0"),
    "cauchy_": (("median", "sigma"), (0.0, 1.0), "torch.zeros_like(v, dtype=torch.bool)"),
    "bernoulli_": (("p",), (0.5,), "(v != 0) & (v != 1)"),
    "random_": (("from", "to"), (None, None), "v != torch.floor(v)"),
}


def method(finding: Finding) -> str:
    """The method an aten op name stands for: ``aten.bernoulli_.float`` -> ``bernoulli_``."""
    names = finding.op.split(".")
    return names[1] if len(names) >= 3 and names[0] == "aten" else finding.op


def _literal_parameters(call: CallSpec, name: str) -> dict:
    """The method's parameters read from the call source (literals only; self skipped)."""
    names, defaults, _ = SUPPORT[name]
    tree = ast.parse(parts.call_source(call), mode="eval").body
    assert isinstance(tree, ast.Call)
    positional = [_literal(node) for node in tree.args[1:]]
    if name == "random_" and len(positional) == 1:
        positional = [0, positional[0]]  # random_(to)
    values = dict(zip(names, defaults))
    values.update(zip(names, positional))
    values.update({k.arg: _literal(k.value) for k in tree.keywords if k.arg in names})
    return values


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None  # a tensor argument: no bound can be read from it


def support(finding: Finding, call: CallSpec, torch_version: str) -> list[str]:
    name = method(finding)
    p = _literal_parameters(call, name)
    bad = SUPPORT[name][2].format(**{k: repr(float(v)) if v is not None else "None" for k, v in p.items()})
    if name == "random_":
        bad += "".join(f" | (v {op} {float(p[k])!r})" for k, op in (("from", "<"), ("to", ">=")) if p[k] is not None)
    constants = [f"WRITTEN = {parts.written(call) or ('input',)!r}  # the tensors the call draws into",
                 f"# {name} with {p}: no draw may satisfy  {bad}"]
    lines = parts.preamble(finding, call, torch_version, (), constants)
    lines += parts.function_lines(call)
    lines += parts.tensors_function(call)
    lines += parts.start_main(call, f"{name} must draw values its distribution can produce")
    lines += [
        "    torch.manual_seed(CALL_SEED)",
        "    call(T)",
        "    impossible = 0",
        "    for path in WRITTEN:",
        "        values = T[path].detach().cpu()",
        "        v = values.double()",
        f"        bad = {bad}",
        "        if values.is_floating_point():",
        "            bad = bad | torch.isnan(values)",
        '        low, high = (float(v.min()), float(v.max())) if v.numel() else (None, None)',
        '        print(f"{path}: {int(bad.sum())} of {v.numel()} draw(s) impossible; min {low}, max {high}")',
        "        impossible += int(bad.sum())",
    ]
    lines += parts.verdict("impossible", "every draw is one the distribution can produce")
    return lines + parts.data_block(call) + parts.footer()
