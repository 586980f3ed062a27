"""Recursion lowering against the reference evaluator, on the LoopProgram interpreter.

Every zoo model (small sizes) x structure families (single leaf, chain, balanced, random,
wide / high arity, DAG with shared children, grids for DAG-RNN, a mixed batch) x schedules
(the CPU and GPU defaults, ``fuse=False``, ``leaf_specialization=False``, random legal
schedules of a CPU-like and a GPU-like target) x float32/float64. Batches come from the real
linearizer (``cortex.core.linearize``). The helpers here are shared with ``test_lower_*.py``.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from cortex import models as M
from cortex.core.frontend import reference
from cortex.core.frontend.trace import trace
from cortex.core.linearize import ChildTable, Grid, Sequence, linearize
from cortex.core.loopir import interpret
from cortex.core.loopir.verify import verify
from cortex.core.lowering.lower import Lowered, lower
from cortex.core.lowering.schedule import ScheduleSpace
from cortex.core.passes.pipeline import DEFAULT_PASSES, run_passes
from cortex.core.plugin.capabilities import Capabilities
from cortex.testing.structures import balanced, caterpillar

CPU = Capabilities(num_cores=4, vector_bits=256, cache_bytes_per_core=1 << 20, dialect="c", single_call=True)
GPU = Capabilities(has_grid=True, grid_barrier=True, group_barrier=True, max_threads_per_group=1024,
                   max_groups=132, shared_memory_bytes=48 * 1024, vector_bits=0, dialect="cuda")
V, D, H = 11, 5, 8


# ---------------------------------------------------------------------------- structures


def _random_tree(rng, leaves: int, k: int | None) -> list[list[int]]:
    """Children lists of a random tree: fixed arity k, or variable arity (1..4) when k is None."""
    children: list[list[int]] = [[] for _ in range(leaves)]
    frontier = list(range(leaves))
    while len(frontier) > 1:
        a = k if k is not None else int(rng.integers(1, 5))
        a = min(a, len(frontier)) if k is None else a
        if len(frontier) < a:
            break
        pick = sorted(rng.choice(len(frontier), size=a, replace=False))
        kids = [frontier[i] for i in pick]
        frontier = [f for i, f in enumerate(frontier) if i not in pick]
        children.append(kids)
        frontier.append(len(children) - 1)
    if len(frontier) > 1:  # fixed arity leftovers: pad with fresh leaves
        while len(frontier) > 1:
            kids = frontier[:k]
            frontier = frontier[k:]
            while len(kids) < k:  # type: ignore[operator]
                children.append([])
                kids.append(len(children) - 1)
            children.append(kids)
            frontier.append(len(children) - 1)
    return children


def _chain(length: int, k: int | None) -> list[list[int]]:
    """A left-deep chain: every internal node has one previous internal node as child 0."""
    return caterpillar(length, k or 1)


def _dag(rng, n: int) -> list[list[int]]:
    """A DAG with shared children: node i>=3 takes 1..3 distinct earlier nodes; one sink."""
    children: list[list[int]] = [[], [], []]
    for i in range(3, n):
        children.append(sorted(rng.choice(i, size=min(i, int(rng.integers(1, 4))), replace=False).tolist()))
    used = {c for cs in children for c in cs}
    children.append([v for v in range(n) if v not in used])  # the sink collects the rest
    return children


def families(arity: int | None, rng) -> dict[str, list[list[list[int]]]]:
    """Family name -> list of children-lists (one batch each)."""
    if arity == 1:
        return {"single_leaf": [[[]]], "chain": [_chain(12, 1)], "mixed": [_chain(int(n), 1) for n in (0, 3, 7, 1)]}
    if arity is None:
        return {
            "single_leaf": [[[]]],
            "chain": [_chain(9, None)],
            "balanced": [balanced(2, 3)],
            "random": [_random_tree(rng, 14, None), _random_tree(rng, 5, None)],
            "wide": [[[] for _ in range(9)] + [list(range(9))]],
            "dag": [_dag(rng, 14)],
            "mixed": [[[]], _chain(4, None), _random_tree(rng, 7, None), _dag(rng, 8)],
        }
    return {
        "single_leaf": [[[]]],
        "chain": [_chain(9, arity)],
        "balanced": [balanced(3, arity)],
        "random": [_random_tree(rng, 11, arity)],
        "mixed": [[[]], _chain(3, arity), _random_tree(rng, 6, arity), balanced(2, arity)],
    }


def grid_families() -> dict[str, list[tuple[int, int]]]:
    return {"single_leaf": [(1, 1)], "chain": [(1, 6)], "grid": [(3, 4)], "mixed": [(2, 5), (1, 1), (4, 2)]}


def make_batch(spec, family_items, rng):
    """A LinearizedBatch for one family of structures, with words or features as the model reads."""
    inputs = {i.kind: i for i in spec.graph.node_inputs}
    structs = []
    for item in family_items:
        if spec.grid:
            rows, cols = item
            structs.append(Grid(rows, cols, features=rng.normal(size=(rows * cols, D))))
            continue
        n = len(item)
        words = rng.integers(0, V, n).tolist() if "word" in inputs else None
        feats = rng.normal(size=(n, D)) if "features" in inputs else None
        if spec.graph.arity == 1 and words is not None:
            # a chain's node i has child i-1: a Sequence of tokens
            structs.append(Sequence(words))
            continue
        width = max(1, max(len(c) for c in item))
        table = np.full((n, width), -1, dtype=np.int64)
        for v, cs in enumerate(item):
            table[v, : len(cs)] = cs
        structs.append(ChildTable(table, words=words, features=feats))
    return linearize(structs, arity=spec.graph.arity,
                     vocab_size=V if "word" in inputs else None,
                     feature_dim=D if "features" in inputs else None, cache=False)


# ---------------------------------------------------------------------------- models


class Spec:
    def __init__(self, name: str, factory, grid: bool = False) -> None:
        self.name = name
        self.factory = factory
        self.grid = grid
        self.model = factory("float64")
        self.graph = run_passes(trace(self.model), DEFAULT_PASSES)

    def __repr__(self) -> str:
        return self.name


SPECS = [
    Spec("TreeFC", lambda dt: M.TreeFC(hidden=H, embed=D, vocab=V, dtype=dt, seed=1)),
    Spec("TreeFC3", lambda dt: M.TreeFC(hidden=H, features=D, arity=3, dtype=dt, seed=2)),
    Spec("TreeRNN", lambda dt: M.TreeRNN(hidden=H, vocab=V, dtype=dt, seed=3)),
    Spec("TreeGRU", lambda dt: M.TreeGRU(hidden=H, embed=D, vocab=V, dtype=dt, seed=4)),
    Spec("TreeLSTM", lambda dt: M.TreeLSTM(hidden=H, embed=D, vocab=V, dtype=dt, seed=5)),
    Spec("TreeLSTM3", lambda dt: M.TreeLSTM(hidden=H, features=D, arity=3, dtype=dt, seed=6)),
    Spec("ChildSumTreeLSTM", lambda dt: M.ChildSumTreeLSTM(hidden=H, embed=D, vocab=V, dtype=dt, seed=7)),
    Spec("MVRNN", lambda dt: M.MVRNN(hidden=4, vocab=V, dtype=dt, seed=8)),
    Spec("DAGRNN", lambda dt: M.DAGRNN(hidden=H, features=D, dtype=dt, seed=9), grid=True),
    Spec("DAGRNN_tree", lambda dt: M.DAGRNN(hidden=H, features=D, dtype=dt, seed=12)),
    Spec("SeqLSTM", lambda dt: M.SeqLSTM(hidden=H, features=D, dtype=dt, seed=10)),
    Spec("SeqGRU", lambda dt: M.SeqGRU(hidden=H, embed=D, vocab=V, dtype=dt, seed=11)),
]


def spec_families(spec, rng):
    return grid_families() if spec.grid else families(spec.graph.arity, rng)


def run_lowered(low: Lowered, params, batch) -> dict[str, np.ndarray]:
    p = low.prepare_params(params)
    bufs, sizes = low.bind_batch(batch)
    out = interpret.run(low.program, {**p, **bufs}, sizes)
    return low.states(out, sizes["N"])


def assert_close(got: dict, ref: dict, dtype: str, what: str) -> None:
    for s, r in ref.items():
        g = np.asarray(got[s], dtype=np.float64)
        assert g.shape == r.shape, f"{what}: state {s} shape {g.shape} != {r.shape}"
        if dtype == "float64":
            np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10, err_msg=f"{what}: state {s}")
        else:
            scale = max(1.0, float(np.max(np.abs(r))) if r.size else 1.0)
            err = float(np.max(np.abs(g - r))) / scale if r.size else 0.0
            assert err <= 1e-4, f"{what}: state {s}: float32 relative error {err:.2e} > 1e-4"


def schedules(dtype: str, seed: int, full: bool = True):
    """(label, caps, schedule): defaults, fuse off, leaf specialization off, random legal ones
    (``full=False``: the defaults and one random schedule per target)."""
    cpu, gpu = ScheduleSpace(CPU, dtype), ScheduleSpace(GPU, dtype)
    if not full:
        return [("cpu-default", CPU, cpu.default()), ("gpu-default", GPU, gpu.default()),
                ("cpu-random", CPU, cpu.sample(seed, 1)[0]), ("gpu-random", GPU, gpu.sample(seed + 1000, 1)[0])]
    out = [
        ("cpu-default", CPU, cpu.default()),
        ("gpu-default", GPU, gpu.default()),
        ("unfused", CPU, cpu.with_knobs(fuse=False)),
        ("no-leaf-spec", CPU, cpu.with_knobs(leaf_specialization=False)),
        ("gpu-unfused-no-leaf-spec", GPU, gpu.with_knobs(fuse=False, leaf_specialization=False)),
    ]
    out += [(f"cpu-random{i}", CPU, s) for i, s in enumerate(cpu.sample(seed, 2))]
    out += [(f"gpu-random{i}", GPU, s) for i, s in enumerate(gpu.sample(seed + 1000, 2))]
    return out


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_every_family_default_schedule_float64(spec):
    """Default CPU schedule, float64: every structure family matches the reference to 1e-10."""
    rng = np.random.default_rng(0)
    low = lower(spec.graph, ScheduleSpace(CPU, "float64").default(), CPU, "float64")
    verify(low.program, CPU)
    for fam, items in spec_families(spec, rng).items():
        batch = make_batch(spec, items, rng)
        ref = reference.evaluate(spec.graph, spec.model.params, batch)
        assert_close(run_lowered(low, spec.model.params, batch), ref, "float64", f"{spec.name}/{fam}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_schedules_on_mixed_batch(spec, dtype):
    """Defaults, fuse off, leaf specialization off and random legal schedules (CPU- and GPU-like)
    agree with the reference and with each other on one mixed batch; every program verifies.
    float32 runs the defaults and one random schedule per target (the rest is dtype-blind)."""
    rng = np.random.default_rng(1)
    batch = make_batch(spec, spec_families(spec, rng)["mixed"], rng)
    model = spec.factory(dtype)
    ref = reference.evaluate(spec.graph, model.params, batch)
    first = None
    seed = zlib.crc32(spec.name.encode()) % 1000
    for label, caps, sched in schedules(dtype, seed, full=dtype == "float64"):
        low = lower(spec.graph, sched, caps, dtype)  # lower() verifies with the target's caps
        got = run_lowered(low, model.params, batch)
        assert_close(got, ref, dtype, f"{spec.name}/{label} {sched.to_json()}")
        if first is None:
            first = got
        else:  # differential: every schedule vs the default one on the same batch
            tol = 1e-12 if dtype == "float64" else 1e-4
            for s in first:
                np.testing.assert_allclose(got[s], first[s], rtol=tol, atol=tol, err_msg=f"{label} vs default")


@pytest.mark.parametrize("spec", [s for s in SPECS if s.name in ("TreeLSTM", "ChildSumTreeLSTM", "TreeGRU", "MVRNN")], ids=repr)
def test_fused_equals_unfused_on_every_family(spec):
    """Differential: fused and unfused (dense intermediates) programs give the same states."""
    rng = np.random.default_rng(2)
    sp = ScheduleSpace(CPU, "float64")
    fused = lower(spec.graph, sp.default(), CPU, "float64")
    unfused = lower(spec.graph, sp.with_knobs(fuse=False), CPU, "float64")
    assert any(b.role == "temp" for b in unfused.program.buffers)
    for fam, items in spec_families(spec, rng).items():
        batch = make_batch(spec, items, rng)
        a = run_lowered(fused, spec.model.params, batch)
        b = run_lowered(unfused, spec.model.params, batch)
        for s in a:
            np.testing.assert_allclose(a[s], b[s], rtol=1e-12, atol=1e-12, err_msg=f"{fam}: {s}")
