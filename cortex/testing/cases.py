"""The case generator: zoo models x structure families x dtypes x schedules x targets.

Pipeline position: the suite's plan. :func:`cases` lists the cases of one kind for the
selected targets; the pytest plugin (``cortex.testing.plugin``) parametrizes the shipped tests
(``cortex.testing.test_conformance``) with them. Five kinds:

* ``compile``   — code generation and compilation succeed (every target, runnable or not);
* ``reference`` — a run agrees with the float64 reference (runnable targets);
* ``differential`` — on one target, the unscheduled, the unfused, the jammed, the
  node-blocked (``state_layout``), the refactored and the unrolled program agree with the
  default (scheduled, fused) program on the ``mixed`` batch;
* ``contract``  — the executable's output contract (states, order, dtype, shapes, rows);
* ``nonfinite`` — NaN and infinities in the input features propagate through every elementwise
  op as in the reference (``model`` names the op, see :mod:`cortex.testing.nonfinite`).

The default sweep is modest (CI runs it for every target): every model x every family x
float32/float64 on the default schedule, the differential cases in float32, and the
10,000-node chain for two models. ``--cortex-full`` (or ``CORTEX_TEST_FULL=1``) adds the
differential cases in float64, three random legal schedules per model and dtype (compiled and
run on the ``mixed`` batch) and the 10,000-node chain for every model.

Weight storage: on a target whose capabilities list ``"bfloat16"`` weights
(``Capabilities.weight_storage``), every model also runs every family in float32 with
``weights="bfloat16"`` (the tolerance's ``bfloat16`` row: the reference keeps the unrounded
weights), its default program compiles, and its unscheduled, jammed and node-blocked programs
agree with its default one within the float32 tolerance (they read the same rounded weights).
Those cases' ids name the dtype ``float32+bfloat16``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cortex.testing import zoo
from cortex.testing.structures import FAMILIES, not_applicable

DTYPES = ("float32", "float64")
#: The long chain in the default sweep: (model, dtype). A fixed-arity caterpillar and a
#: variable-arity unary chain (10,000 levels), one per float type.
DEFAULT_LONG_CHAINS = (("TreeLSTM", "float32"), ("ChildSumTreeLSTM", "float64"))
FULL_SAMPLES = 3
KINDS = ("compile", "reference", "differential", "contract", "nonfinite")


@dataclass(frozen=True)
class Case:
    kind: str
    target: str
    model: str
    dtype: str
    schedule: str = "default"  # a variant of cortex.testing.build
    family: str = "mixed"
    against: str = ""  # differential: the variant compared with ``schedule``
    weights: str = ""  # the ``weights`` compile option ("" = the compute dtype)

    @property
    def id(self) -> str:
        parts = [self.target, self.model]
        if self.kind == "reference":
            parts.append(self.family)
        parts += [f"{self.dtype}+{self.weights}" if self.weights else self.dtype, self.schedule]
        if self.against:
            parts.append(f"vs-{self.against}")
        return "-".join(parts)


def _arity(model_id: str) -> int | None:
    return zoo.get(model_id).model().arity


def cases(kind: str, targets: tuple[str, ...], full: bool = False,
          exclude: tuple[str, ...] = ()) -> list[Case]:
    """Every case of ``kind`` for ``targets`` (see the module docstring), without the
    reference cases of the structure families in ``exclude``."""
    if kind not in KINDS:
        raise ValueError(f"unknown case kind {kind!r}; known: {KINDS}")
    samples = [f"sample{i}" for i in range(FULL_SAMPLES)] if full else []
    out: list[Case] = []
    if kind == "nonfinite":
        from cortex.testing.nonfinite import OPS

        return [Case(kind, target, op, dtype) for target in targets for dtype in DTYPES for op in OPS]
    for target in targets:
        for m in zoo.zoo():
            for dtype in DTYPES:
                if kind == "compile":
                    variants = ["default"]
                    if full or dtype == "float32":
                        variants += ["unscheduled", "unfused", "jammed", "refactored", "unrolled"]
                    out += [Case(kind, target, m.id, dtype, v) for v in variants + samples]
                elif kind == "reference":
                    for fam in FAMILIES:
                        if fam in exclude or not_applicable(fam, _arity(m.id)) is not None:
                            continue
                        if fam == "long_chain" and not full and (m.id, dtype) not in DEFAULT_LONG_CHAINS:
                            continue
                        out.append(Case(kind, target, m.id, dtype, "default", fam))
                    out += [Case(kind, target, m.id, dtype, s, "mixed") for s in samples]
                elif kind == "differential":
                    if full or dtype == "float32":
                        out += [Case(kind, target, m.id, dtype, v, "mixed", against="default")
                                for v in ("unscheduled", "unfused", "jammed", "blocked", "refactored", "unrolled")]
                else:
                    out.append(Case(kind, target, m.id, dtype))
            if kind != "contract":
                out += [replace(c, weights=weights) for weights in weight_formats(target)
                        for c in _weight_cases(kind, target, m.id, full, exclude)]
    return out


#: The schedules the weight-storage cases compare with the default one (same rounded weights).
WEIGHT_DIFFERENTIAL = ("unscheduled", "jammed", "blocked")


def weight_formats(target: str) -> tuple[str, ...]:
    """The weight storage formats ``target`` reads (``Capabilities.weight_storage``); none for
    a target not registered or not enabled here (the plugin refuses such a selection itself)."""
    from cortex.core.errors import TargetNotEnabledError, UnknownTargetError
    from cortex.testing.build import backend

    try:
        return tuple(backend(target).capabilities.weight_storage)
    except (UnknownTargetError, TargetNotEnabledError):
        return ()


def _weight_cases(kind: str, target: str, model_id: str, full: bool,
                  exclude: tuple[str, ...]) -> list[Case]:
    """The float32 cases of ``model_id`` re-run with stored weights (``weights`` set by the caller)."""
    if kind == "compile":
        return [Case(kind, target, model_id, "float32")]
    if kind == "differential":
        return [Case(kind, target, model_id, "float32", v, "mixed", against="default")
                for v in WEIGHT_DIFFERENTIAL]
    out = []
    for fam in FAMILIES:
        if fam in exclude or not_applicable(fam, _arity(model_id)) is not None:
            continue
        if fam == "long_chain" and not full and (model_id, "float32") not in DEFAULT_LONG_CHAINS:
            continue
        out.append(Case(kind, target, model_id, "float32", "default", fam))
    return out

