"""The case generator: zoo models x structure families x dtypes x schedules x targets.

Pipeline position: the suite's plan. :func:`cases` lists the cases of one kind for the
selected targets; the pytest plugin (``cortex.testing.plugin``) parametrizes the shipped tests
(``cortex.testing.test_conformance``) with them. Five kinds:

* ``compile``   — code generation and compilation succeed (every target, runnable or not);
* ``reference`` — a run agrees with the float64 reference (runnable targets);
* ``differential`` — on one target, the unscheduled, the unfused and the jammed program agree
  with the default (scheduled, fused) program on the ``mixed`` batch;
* ``contract``  — the executable's output contract (states, order, dtype, shapes, rows);
* ``nonfinite`` — NaN and infinities in the input features propagate through every elementwise
  op as in the reference (``model`` names the op, see :mod:`cortex.testing.nonfinite`).

The default sweep is modest (CI runs it for every target): every model x every family x
float32/float64 on the default schedule, the differential cases in float32, and the
10,000-node chain for two models. ``--cortex-full`` (or ``CORTEX_TEST_FULL=1``) adds the
differential cases in float64, three random legal schedules per model and dtype (compiled and
run on the ``mixed`` batch) and the 10,000-node chain for every model.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def id(self) -> str:
        parts = [self.target, self.model]
        if self.kind == "reference":
            parts.append(self.family)
        parts += [self.dtype, self.schedule]
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
                        variants += ["unscheduled", "unfused", "jammed"]
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
                                for v in ("unscheduled", "unfused", "jammed")]
                else:
                    out.append(Case(kind, target, m.id, dtype))
    return out
