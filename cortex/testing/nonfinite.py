"""Non-finite inputs: every elementwise op propagates NaN and infinities as the reference does.

Pipeline position: one kind of case of the conformance suite (``nonfinite``, run by
``cortex.testing.test_conformance.test_nonfinite_propagates``). A silent fix-up of a NaN (C's
``fmax``, LLVM's ``maxnum``: ``relu(NaN) = 0``) turns garbage input into plausible output; the
float64 reference (NumPy) keeps NaN as NaN and ``inf - inf`` as NaN, and so must every target.

:class:`NonFiniteOps` has one state per op (``OPS``): at a leaf the op applied to the node's
features (``x + p`` for the binary ones, ``p`` a param), at an internal node to its children's
states (``relu(c0 - c1)``, ``sigmoid(c0 + c1)``, ``tanh(c0 * c1)``, ``c0 + c1``, ``c0 - c1``,
``c0 * c1``, ``linear(W, c0 + c1, b)``), so infinities of opposite signs meet and make NaN.
:func:`structures` holds leaves with NaN, +-inf, -0 and large but safe values next to finite
ones, and one all-finite tree. :func:`check` requires the same NaN and +-inf positions as the
reference and the tolerance table's agreement everywhere else.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from cortex.testing.tolerance import TOLERANCES, ConformanceFailure

OPS = ("relu", "sigmoid", "tanh", "add", "sub", "mul", "linear")
F = 5  # features per node

_INF, _NAN = float("inf"), float("nan")
#: leaf feature rows: NaN, infinities of both signs, -0, values far from 0 (|x| < 1e4, so no
#: product in the model overflows float32 where the float64 reference would not)
LEAVES = np.array([
    [_NAN, 1.0, -2.0, 0.5, 3.0],
    [_INF, -_INF, 1.0, -0.0, 2.0],
    [-_INF, _INF, _NAN, 4.0, -1.0],
    [1e4, -1e4, 0.25, _INF, -3.0],
    [0.5, -0.5, 1.0, 2.0, -1.0],
    [1.0, 2.0, 3.0, -4.0, 0.0],
])


def model(dtype: str = "float64"):
    """The op model (built once per dtype; float64 params, rounded by the compile dtype)."""
    from cortex.core.frontend.model import Model

    class NonFiniteOps(Model):
        """One state per elementwise op of the model vocabulary (see the module docstring)."""

        def __init__(self) -> None:
            super().__init__(arity=2, dtype=dtype, seed=12)
            self.add_feature_input("x", F)
            for op in OPS:
                self.add_state(op, (F,))
            self.add_param("p", (F,))
            self.add_param("W", (F, F))
            self.add_param("b", (F,))

        def leaf(self, g):
            x, p = g.input("x"), g.param("p")
            return {"relu": g.relu(x), "sigmoid": g.sigmoid(x), "tanh": g.tanh(x), "add": x + p,
                    "sub": x - p, "mul": x * p, "linear": g.linear("W", x, "b")}

        def internal(self, g):
            def kids(s: str):
                return g.child(s, 0), g.child(s, 1)

            (r0, r1), (s0, s1), (t0, t1) = kids("relu"), kids("sigmoid"), kids("tanh")
            (a0, a1), (d0, d1), (m0, m1), (l0, l1) = kids("add"), kids("sub"), kids("mul"), kids("linear")
            return {"relu": g.relu(r0 - r1), "sigmoid": g.sigmoid(s0 + s1), "tanh": g.tanh(t0 * t1),
                    "add": a0 + a1, "sub": d0 - d1, "mul": m0 * m1, "linear": g.linear("W", l0 + l1, "b")}

    return NonFiniteOps()


_MODEL: dict[str, Any] = {}
_EXES: dict[tuple[str, str], Any] = {}


def _model() -> Any:
    if "m" not in _MODEL:
        _MODEL["m"] = model("float64")
    return _MODEL["m"]


def executable(target: str, dtype: str) -> Any:
    """The op model compiled for ``target`` in ``dtype`` (once per process)."""
    import cortex

    key = (target, dtype)
    if key not in _EXES:
        _EXES[key] = cortex.compile(_model(), target=target, dtype=dtype)
    return _EXES[key]


def structures() -> list[Any]:
    """Trees over :data:`LEAVES`: pairs and a two-level tree that bring opposite infinities
    together, and one tree of finite leaves only."""
    from cortex.data import ParentArray

    def tree(parents: list[int], leaves: list[int]) -> Any:
        feats = np.zeros((len(parents), F))
        feats[: len(leaves)] = LEAVES[leaves]
        return ParentArray(np.array(parents), features=feats)

    return [tree([2, 2, -1], [0, 1]),
            tree([4, 4, 5, 5, 6, 6, -1], [1, 2, 3, 4]),
            tree([4, 4, 5, 5, 6, 6, -1], [2, 1, 1, 2]),
            tree([2, 2, -1], [4, 5])]


def reference(batch: Any) -> dict[str, np.ndarray]:
    from cortex.core.frontend.reference import evaluate
    from cortex.core.frontend.trace import trace

    with np.errstate(invalid="ignore", over="ignore"):
        return evaluate(trace(_model()), _model().params, batch)


def check(state: str, got: np.ndarray, want: np.ndarray, dtype: str, where: str) -> None:
    """NaN where the reference has NaN, the same infinities, the tolerance elsewhere."""
    got = np.asarray(got, dtype=np.float64)
    problems = []
    for what, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        g, w = test(got), test(want)
        if not np.array_equal(g, w):
            rows = sorted(set(np.nonzero(g != w)[0].tolist()))
            problems.append(f"{what} at {int(g.sum())} elements where the reference has it at "
                            f"{int(w.sum())} (node rows {rows[:8]})")
    finite = np.isfinite(want) & np.isfinite(got)
    if finite.any():
        tol = TOLERANCES[dtype]
        scale = max(1.0, float(np.abs(want[finite]).max()))
        err = np.abs(got[finite] - want[finite])
        bad = err > tol.atol * scale + tol.rtol * np.abs(want[finite])
        if bad.any():
            problems.append(f"{int(bad.sum())} finite elements off by up to {float(err.max()):.3g} "
                            f"({tol.describe()})")
    if problems:
        raise ConformanceFailure(f"{where}: state {state!r} (op {state}) on non-finite inputs: "
                                 + "; ".join(problems))


def run(target: str, op: str, dtype: str, where: str) -> None:
    """Compile (once), run :func:`structures`, compare state ``op`` with the reference."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {OPS}")
    exe = executable(target, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        out = exe(structures())
    want: Mapping[str, np.ndarray] = reference(out.batch)
    check(op, out.nodes(op), want[op], dtype, where)
