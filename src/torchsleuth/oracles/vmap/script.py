"""The repro script of a ``vmap`` finding: the call under torch.func.vmap over a batch, against each sample alone.

Design note. The script is assembled from the repro kit (scripts.parts: the
header, the tensors rebuilt exactly, the call as source, the bytes, the
footer; scripts.kit's ``leaves``, ``describe`` and ``load_imports``), the
oracles' elementwise rule (judge.elementwise: ``disagree``, ``report``) and
the oracle's own batch code (vmap.batch, copied with ``inspect.getsource``),
so it rebuilds the very batch the oracle made: the call's tensors first,
then the other samples redrawn from the same seed (or copied), stacked at
the finding's in_dims. What it maps is the call itself or, for a gradient
finding, the call's vjp against the call's cotangents (``grad_output[i]``,
rebuilt with the tensors). It prints, for every sample, the batched result
against the sample alone and each element that disagrees: a change of
class, any difference in an integer or bool result, or more than
``ATOL + RTOL * |alone| + SLACK`` (the table's tolerance and what the
oracle's rule allowed beyond it at the worst element, carried as one
amount: the script knows no float64 reference). The finding's ``Detail``
(detail.py, read from ``Finding.data``) is all it reads of the finding
beyond the call; the run's ``--import`` modules are imported first.

Exit status: 1 while a sample disagrees, 0 once none does, 2 when the call
(or vmap) raises.
"""

from __future__ import annotations

import inspect

from ...judge import elementwise
from ...judge.records import Finding
from ...scripts import parts
from . import batch
from .detail import FORWARD, Detail

_MAIN = '''

def function(T):
    """What vmap maps: the call itself, or the gradient of its floating outputs against the call's cotangents (vjp)."""
    if MODE == "forward":
        return call(T)
    cotangents = [t for path, t in T.items() if path.startswith("grad_output")]
    return gradients(call, DIFFERENTIATED, cotangents)(T)


def main():
    load_imports()
    T = {path: t.detach() for path, t in tensors().items()}
    print("torchsleuth repro: torch.func.vmap of", "the call" if MODE == "forward" else "its gradient (vjp)",
          f"over a batch of {BATCH} samples must give each sample's own result")
    print("call:", CALL)
    print(f"vmap over {PATHS} with in_dims={IN_DIMS}; sample 0 is the call's own, the others", FILL, f"(seed {SEED})")
    describe(T)
    samples = unmapped(members(T, PATHS, FILL, SEED, BATCH), PATHS, IN_DIMS)
    batched = vmapped(function, samples, PATHS, IN_DIMS)
    wrong = []
    for b, sample in enumerate(samples):
        alone = dict(leaves(function(sample)))
        mine = sample_of(batched, b)
        for path, e in alone.items():
            a = mine[path]
            label = f"sample {b}"
            if a.shape != e.shape or a.dtype != e.dtype:
                print(f"{label}: {path}: batched gives shape {list(a.shape)} {a.dtype}, alone {list(e.shape)} {e.dtype}")
                wrong.append(label)
                continue
            bad = disagree(a, e, signed_zero=False)
            work = torch.complex128 if a.is_complex() else torch.float64
            x, y = a.detach().cpu().to(work), e.detach().cpu().to(work)
            gap = torch.where(torch.isnan(x) & torch.isnan(y), 0.0, (x - y).abs().double())  # NaN against NaN agrees
            largest = float(torch.nan_to_num(gap, nan=float("inf")).max()) if gap.numel() else 0.0
            print(f"{label}: {path}: {int(bad.sum())} of {bad.numel()} element(s) disagree; largest |batched - alone| {largest:.6g}")
            if bool(bad.any()):
                wrong.append(label)
                shape = list(a.shape)
                report(f"  {label}", path, a, e, bad,
                       lambda i: f"index {[int(j) for j in torch.unravel_index(torch.tensor(i), shape)] if shape else []}")
    if wrong:
        print("disagrees in:", ", ".join(dict.fromkeys(wrong)))
'''


def script(finding: Finding, torch_version: str) -> str | None:
    """The finding's standalone script; None where the generic one applies (no call to write out)."""
    if finding.kind in ("crash", "hang"):
        return parts.died_in_steps(finding, torch_version, "the vmap oracle's own calls (the call under vmap, or a sample alone)")
    if finding.kind not in ("mismatch", "gradient_mismatch"):
        return None
    call, detail, answer = parts.recorded(finding, Detail, torch_version, "the batch it made")
    if detail is None:
        return answer
    m = finding.mismatch
    constants = [
        f"MODE = {detail.mode!r}  # forward: vmap of the call; grad: vmap of its vjp",
        f"PATHS = {detail.paths!r}  # the tensors vmap maps over, in the order the mapped function takes them",
        f"IN_DIMS = {tuple(detail.in_dims)!r}  # each one's batch dim in its stacked tensor (None: not mapped over)",
        f"BATCH = {detail.batch!r}  # samples in the batch, the call's own first",
        f"FILL = {detail.fill!r}  # the other samples: random (values redrawn, seeded) or same (copies)",
        f"SEED = {detail.seed!r}",
        f"DIFFERENTIATED = {detail.differentiated!r}  # grad: the inputs differentiated",
        f"IMPORTS = {detail.imports!r}  # what the sweep imported first (--import); edit if they moved",
        *elementwise.constants(atol=m.atol if m else 0.0, rtol=m.rtol if m else 0.0, slack=detail.slack,
                               reference="alone" if detail.mode == FORWARD else "alone (its gradient alone)"),
        f"CALL = {parts.call_source(call)!r}",
    ]
    lines = parts.preamble(finding, call, torch_version, ("leaves", "load_imports", *elementwise.KIT), constants)
    lines += parts.function_lines(call) + parts.tensors_function(call)
    lines += ["", "", elementwise.source("disagree", "report").rstrip("\n")]
    lines += ["", "", "\n\n\n".join(inspect.getsource(f).rstrip("\n") for f in batch.SOURCE)]
    lines.append(_MAIN.rstrip("\n"))
    return "\n".join(lines + parts.verdict("wrong", "every sample of the batch gives its own result") + parts.data_block(call)
                     + parts.footer())
