"""Running one case of the suite: compile, run, compare, and report.

Pipeline position: what each shipped test calls (``cortex.testing.test_conformance``). Every
function raises :class:`~cortex.testing.tolerance.ConformanceFailure` with a readable report on
disagreement, :class:`NotRunnable` when the target cannot run here (the run part is skipped, with
the reason), or :class:`~cortex.testing.build.ScheduleNotLegal` when the case's schedule is not
in the target's space.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cortex.testing import build, zoo
from cortex.testing.cases import Case
from cortex.testing.structures import family
from cortex.testing.targets import status
from cortex.testing.tolerance import ConformanceFailure, check, tolerance_key


class NotRunnable(Exception):
    """The target compiles here but cannot run; ``str(e)`` is the skip reason."""


def structures(model_id: str, fam: str) -> list[Any]:
    """The batch of family ``fam`` for zoo model ``model_id`` (inputs fitted to the model)."""
    from cortex.core.runtime.executable import linearize_options

    model = zoo.get(model_id).model()
    opts = linearize_options(_graph(model_id))
    batch = family(fam, model.arity, vocab=opts["vocab_size"], features=opts["feature_dim"],
                   seed=zoo.zoo().index(zoo.get(model_id)))
    if batch is None:
        raise ValueError(f"family {fam!r} does not apply to model {model_id!r}")
    return batch


_GRAPHS: dict[str, Any] = {}
_REFERENCE: dict[tuple[str, str], tuple[Any, dict[str, np.ndarray]]] = {}


def _graph(model_id: str) -> Any:
    if model_id not in _GRAPHS:
        from cortex.core.frontend.trace import trace

        _GRAPHS[model_id] = trace(zoo.get(model_id).model())
    return _GRAPHS[model_id]


def reference(model_id: str, fam: str, batch: Any) -> dict[str, np.ndarray]:
    """The float64 reference states of ``batch`` (cached per model and family)."""
    from cortex.core.frontend.reference import evaluate

    key = (model_id, fam)
    cached = _REFERENCE.get(key)
    if cached is not None and _same_batch(cached[0], batch):
        return cached[1]
    want = evaluate(_graph(model_id), zoo.get(model_id).model().params, batch)
    _REFERENCE[key] = (batch, want)
    return want


def _same_batch(a: Any, b: Any) -> bool:
    return (a.num_nodes == b.num_nodes and np.array_equal(a.child_ids, b.child_ids)
            and np.array_equal(a.level_offsets, b.level_offsets)
            and np.array_equal(a.child_offsets, b.child_offsets)
            and _same_optional(a.word_ids, b.word_ids) and _same_optional(a.features, b.features))


def _same_optional(a: Any, b: Any) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _require_runnable(target: str) -> None:
    st = status(target)
    if not st.runnable:
        raise NotRunnable(st.skip_reason)


def _describe_batch(fam: str, batch: Any) -> str:
    return (f"{fam} (batch of {batch.batch_size} input{'s' * (batch.batch_size != 1)}, "
            f"{batch.num_nodes} node{'s' * (batch.num_nodes != 1)}, {batch.num_levels} "
            f"level{'s' * (batch.num_levels != 1)})")


def _schedule_text(exe: Any, variant: str) -> str:
    return f"{variant} {exe.schedule.to_json()}"


def facts(case: Case, exe: Any, batch: Any) -> list[tuple[str, str]]:
    m = zoo.get(case.model)
    return [("target", case.target), ("model", f"{m.id}: {m.description}"),
            ("structure", _describe_batch(case.family, batch)),
            ("schedule", _schedule_text(exe, case.schedule)), ("dtype", case.dtype)] + (
                [("weights", case.weights)] if case.weights else [])


def run_compile(case: Case) -> Any:
    """Generate code and compile; returns the Executable (runnable targets) or the compile-only
    :class:`~cortex.testing.build.Built`."""
    if status(case.target).runnable:
        exe = build.executable(case.target, case.model, case.dtype, case.schedule, case.weights)
        source, key = exe.source, exe.cache_key
    else:
        built = build.built(case.target, case.model, case.dtype, case.schedule, case.weights)
        exe, source, key = built, built.source, built.cache_key
    if not source:
        raise ConformanceFailure(f"{case.id}: the renderer produced empty source")
    if not (isinstance(key, str) and len(key) >= 16):
        raise ConformanceFailure(f"{case.id}: the compiler's cache key {key!r} is not a hex key")
    return exe


def run_reference(case: Case) -> None:
    """Run the case's family and compare every state at every node with the reference."""
    _require_runnable(case.target)
    exe = build.executable(case.target, case.model, case.dtype, case.schedule, case.weights)
    structs = structures(case.model, case.family)
    out = exe(structs)
    want = reference(case.model, case.family, out.batch)
    got = {s: out.nodes(s) for s in out.states}
    check(got, want, tolerance_key(case.dtype, case.weights), batch=out.batch, facts=facts(case, exe, out.batch),
          headline=f"cortex conformance: target {case.target!r} disagrees with the float64 "
                   f"reference")


def run_differential(case: Case) -> None:
    """The case's schedule and the ``against`` schedule give the same states on one target
    (with the same ``weights``: the compute dtype's tolerance)."""
    _require_runnable(case.target)
    exe = build.executable(case.target, case.model, case.dtype, case.schedule, case.weights)
    base = build.executable(case.target, case.model, case.dtype, case.against, case.weights)
    structs = structures(case.model, case.family)
    out, ref = exe(structs), base(structs)
    got = {s: out.nodes(s) for s in out.states}
    want = {s: ref.nodes(s) for s in ref.states}
    info = facts(case, exe, out.batch)
    info.append(("against", _schedule_text(base, case.against)))
    check(got, want, case.dtype, batch=out.batch, facts=info,
          headline=f"cortex conformance: on target {case.target!r} the {case.schedule} program "
                   f"disagrees with the {case.against} one")


def run_contract(case: Case) -> None:
    """The output contract (``cortex.core.runtime.outputs``): which states, in which order, dtype,
    shapes, contiguity, rows, roots, and arrays owned by the caller."""
    _require_runnable(case.target)
    exe = build.executable(case.target, case.model, case.dtype, case.schedule)
    graph = _graph(case.model)
    structs = structures(case.model, case.family)
    out = exe(structs)
    where = f"{case.id}: "

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ConformanceFailure(where + what)

    names = tuple(s.name for s in graph.states)
    need(out.states == names, f"states {out.states}, expected the model's states in declaration "
                              f"order {names}")
    need(out.outputs == tuple(graph.outputs.states),
         f"outputs {out.outputs}, the model declares {tuple(graph.outputs.states)}")
    need(out.dtype == case.dtype, f"Outputs.dtype {out.dtype!r}, compiled for {case.dtype!r}")
    need(out.batch_size == len(structs), f"batch_size {out.batch_size} for {len(structs)} inputs")
    batch = out.batch
    for s in graph.states:
        a = out.nodes(s.name)
        need(isinstance(a, np.ndarray), f"state {s.name!r} is a {type(a).__name__}, not an ndarray")
        need(a.dtype == np.dtype(case.dtype), f"state {s.name!r} has dtype {a.dtype}, compiled "
                                              f"for {case.dtype}")
        need(a.shape == (batch.num_nodes, *s.shape),
             f"state {s.name!r} has shape {list(a.shape)}, expected "
             f"{[batch.num_nodes, *s.shape]} (one row per node)")
        need(a.flags.c_contiguous, f"state {s.name!r} is not C-contiguous")
        roots = out.root(s.name)
        need(roots.shape == (batch.batch_size, *s.shape) and
             np.array_equal(roots, a[np.asarray(batch.roots, dtype=np.intp)]),
             f"root({s.name!r}) is not the rows of batch.roots")
        for b in range(batch.batch_size):
            rows = out.node_ids(b)
            need(bool(np.all(np.diff(rows) > 0)) and int(rows[-1]) == int(batch.roots[b]),
                 f"input {b}: node_ids not ascending with the root last: {rows.tolist()}")
    declared = out.as_dict()
    need(tuple(declared) == tuple(graph.outputs.states),
         f"as_dict() keys {tuple(declared)}, expected {tuple(graph.outputs.states)}")
    # arrays are the caller's: a second call neither reuses nor changes the first's arrays
    first = {s: out.nodes(s).copy() for s in out.states}
    for s in out.states:
        out.nodes(s)[...] = np.nan
    again = exe(structs)
    for s in again.states:
        need(not np.shares_memory(again.nodes(s), out.nodes(s)),
             f"state {s!r}: two calls return the same memory")
        need(bool(np.all(np.isfinite(again.nodes(s)))),
             f"state {s!r}: a second call after the caller overwrote the first call's arrays "
             f"returns non-finite values")
        check({s: again.nodes(s)}, {s: first[s]}, case.dtype, batch=batch,
              facts=facts(case, exe, batch), headline=f"{where}a second call disagrees with "
                                                      f"the first")


def run_nonfinite(case: Case) -> None:
    """NaN and infinities in the inputs come out of op ``case.model`` as in the reference."""
    from cortex.testing import nonfinite

    _require_runnable(case.target)
    nonfinite.run(case.target, case.model, case.dtype, where=f"cortex conformance: {case.id}")
