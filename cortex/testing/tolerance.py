"""The tolerance table and the comparison that turns a disagreement into a readable report.

Pipeline position: the suite's judge. Every run of a compiled model is compared, state by
state and element by element, with the float64 reference (``cortex.core.frontend.reference.evaluate``)
or, in differential cases, with another program's run on the same target.

Tolerance (``TOLERANCES``): an element passes when

    |got - want| <= atol * scale + rtol * |want|,   scale = max(1, max |want| over the state)

so ``atol`` is relative to the state's magnitude (a state whose values reach 50 may be off by
50 * atol anywhere) and ``rtol`` to the element's own. Non-finite values never pass.

=========  ======  ======  ============================================================
dtype      rtol    atol    why
=========  ======  ======  ============================================================
float64    1e-10   1e-10   fp64 agrees to ~1e-15 per op; 1e-10 leaves room for fused
                           multiply-adds, reassociated sums and libm differences over
                           10,000 levels, and still catches any real bug
float32    1e-4    1e-4    float32 rounds at 6e-8; params and inputs are rounded once, sums
                           are reassociated by vectorization/tiling, fast-math exp/tanh lose
                           a few ulps; the models are contractive (tanh/sigmoid), so errors
                           stay at this level even down a 10,000-node chain
bfloat16   1e-2    1e-2    float32 compute with the weight matrices stored in bfloat16
                           (``weights="bfloat16"``), against the reference on the
                           unrounded weights: each weight is off by up to 2^-8 (0.4%)
                           relative, a product sum by up to 2^-8 times its terms' absolute
                           sum over its own size (random signs: far less), and that passes
                           to every later level
                           through the contractive cells; the suite measures at most
                           3.4e-3 (DAG-RNN, whose ReLU cells do not contract), 1e-2
                           leaves room for larger fan-ins
=========  ======  ======  ============================================================

A case's tolerance is looked up by its dtype, or by ``"bfloat16"`` for a case compiled with
``weights="bfloat16"`` (:func:`tolerance_key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    def describe(self) -> str:
        return f"|got - want| <= {self.atol:g} * max(1, max|want|) + {self.rtol:g} * |want|"


TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(rtol=1e-10, atol=1e-10),
    "float32": Tolerance(rtol=1e-4, atol=1e-4),
    "bfloat16": Tolerance(rtol=1e-2, atol=1e-2),
}


def tolerance_key(dtype: str, weights: str = "") -> str:
    """The ``TOLERANCES`` row of a run compiled with ``dtype`` and the ``weights`` option
    (``""`` or the dtype itself: the weights in the compute dtype)."""
    return weights if weights and weights != dtype else dtype


@dataclass(frozen=True)
class StateError:
    """How far one state is from what it should be, and where it is worst."""

    state: str
    max_abs: float
    max_rel: float
    bad: int  # elements out of tolerance (non-finite ones included)
    size: int
    row: int  # node row (linearizer node id) of the worst element
    element: tuple[int, ...]  # index within the node's state
    got: float
    want: float

    @property
    def ok(self) -> bool:
        return self.bad == 0


class ConformanceFailure(AssertionError):
    """A target disagrees with the reference (or with itself across programs)."""


def state_error(state: str, got: np.ndarray, want: np.ndarray, tol: Tolerance) -> StateError:
    """Compare one state ``[N, *shape]`` elementwise under ``tol``."""
    got64 = np.asarray(got, dtype=np.float64)
    want64 = np.asarray(want, dtype=np.float64)
    diff = np.abs(got64 - want64)
    finite = np.isfinite(got64)
    diff = np.where(finite, diff, np.inf)
    scale = max(1.0, float(np.abs(want64).max(initial=0.0)))
    limit = tol.atol * scale + tol.rtol * np.abs(want64)
    bad = ~(diff <= limit)
    rel = diff / np.maximum(np.abs(want64), np.finfo(np.float64).tiny)
    # the worst element: the one furthest beyond its limit (or the largest error if none fails)
    excess = np.where(bad, diff - limit, -np.inf) if bad.any() else diff
    flat = int(np.argmax(excess)) if excess.size else 0
    idx = np.unravel_index(flat, diff.shape) if diff.size else (0,)
    return StateError(
        state=state,
        max_abs=float(diff.max(initial=0.0)),
        max_rel=float(rel.max(initial=0.0)),
        bad=int(bad.sum()),
        size=int(diff.size),
        row=int(idx[0]),
        element=tuple(int(i) for i in idx[1:]),
        got=float(got64[idx]) if diff.size else float("nan"),
        want=float(want64[idx]) if diff.size else float("nan"),
    )


def compare_states(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                   dtype: str) -> list[StateError]:
    """Per state errors of ``got`` against ``want`` under ``TOLERANCES[dtype]``."""
    tol = TOLERANCES[dtype]
    if set(got) != set(want):
        raise ConformanceFailure(f"the run returned states {sorted(got)}, the reference has "
                                 f"{sorted(want)}")
    out = []
    for name, ref in want.items():
        g = got[name]
        if g.shape != ref.shape:
            raise ConformanceFailure(f"state {name!r} has shape {list(g.shape)}, the reference "
                                     f"{list(ref.shape)}")
        out.append(state_error(name, g, ref, tol))
    return out


def _where(err: StateError, batch: Any) -> str:
    text = f"node row {err.row}"
    node_input = getattr(batch, "node_input", None)
    if node_input is not None and err.row < len(node_input):
        b = int(node_input[err.row])
        text += f" (input {b}"
        origin = getattr(batch, "origin", None)
        if origin is not None:
            try:
                text += f", node {origin[err.row][1]!r}"
            except (IndexError, KeyError, TypeError):
                pass
        text += ")"
    elem = "[" + ", ".join(map(str, err.element)) + "]" if err.element else "(scalar)"
    return f"{text}, state {err.state!r}, element {elem}"


def format_report(*, headline: str, facts: Sequence[tuple[str, str]],
                  errors: Sequence[StateError], dtype: str, batch: Any = None) -> str:
    """The failure message: what ran, the tolerance, and per state the worst element."""
    width = max([len("tolerance")] + [len(k) for k, _ in facts])
    lines = [headline]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in facts]
    lines.append(f"  {'tolerance'.ljust(width)}  {dtype}: {TOLERANCES[dtype].describe()}")
    for e in errors:
        mark = "FAIL" if not e.ok else "ok  "
        lines.append(f"  {mark} state {e.state!r}: max abs error {e.max_abs:.3g}, max rel error "
                     f"{e.max_rel:.3g}; {e.bad} of {e.size} elements out of tolerance")
        if not e.ok:
            lines.append(f"       worst at {_where(e, batch)}: got {e.got!r}, want {e.want!r}")
    return "\n".join(lines)


def check(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], dtype: str, *,
          headline: str, facts: Sequence[tuple[str, str]], batch: Any = None) -> list[StateError]:
    """Raise :class:`ConformanceFailure` with the report unless every state is in tolerance;
    return the per state errors otherwise."""
    errors = compare_states(got, want, dtype)
    if not all(e.ok for e in errors):
        raise ConformanceFailure(format_report(headline=headline, facts=facts, errors=errors,
                                               dtype=dtype, batch=batch))
    return errors
