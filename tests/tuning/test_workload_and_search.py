"""Workloads and their classes; the cost model's features; the proposers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from cortex import Capabilities
from cortex.core.lowering.schedule import Knob, ScheduleSpace
from cortex.models import DAGRNN, SeqGRU, TreeLSTM
from cortex.tuning.cost_model import CostModel, Encoder
from cortex.tuning.records import Trial
from cortex.tuning.search import ModelProposer, RandomProposer, make_proposer, schedule_key
from cortex.tuning.workload import Workload, WorkloadSpec
from cortex.tuning.workload_class import class_distance, parse_class

CPU = Capabilities(num_cores=4, vector_bits=256, cache_bytes_per_core=1 << 20, dialect="")


@pytest.fixture(scope="module")
def tree_model() -> TreeLSTM:
    return TreeLSTM(hidden=4, embed=3, vocab=20, seed=1)


@pytest.mark.parametrize("shape, cls", [("parse", "b8-n32-parse"), ("balanced", "b8-n32-balanced"),
                                        ("chain", "b8-n32-chain"), ("dag", "b8-n64-dag")])
def test_synthetic_workloads_get_the_class_of_their_shape(tree_model: TreeLSTM, shape: str, cls: str) -> None:
    wl = Workload.from_spec(tree_model, WorkloadSpec(batch_size=10, nodes=60, shape=shape))
    assert wl.workload_class == cls
    assert len(wl.batches) == 3 and all(b.batch_size == 10 for b in wl.batches)


def test_sequence_and_grid_workloads() -> None:
    seq = Workload.from_spec(SeqGRU(hidden=4, embed=3, vocab=9), WorkloadSpec(batch_size=1, nodes=40))
    assert seq.workload_class == "b1-n32-chain"
    grid = Workload.from_spec(DAGRNN(hidden=4, features=3), WorkloadSpec(batch_size=2, nodes=30, shape="grid"))
    assert grid.stats.shape == "dag"
    with pytest.raises(ValueError, match="variable-arity"):
        Workload.from_spec(TreeLSTM(hidden=4, embed=3, vocab=9), WorkloadSpec(shape="grid"))


def test_the_users_batches_are_classified_like_synthetic_ones(tree_model: TreeLSTM) -> None:
    def chain(n: int, w: int = 1):
        t = w
        for _ in range(n):
            t = (t, w)
        return t

    wl = Workload.from_batches(tree_model, [[chain(20), chain(25)], [chain(30)]])
    assert wl.workload_class == "b1-n32-chain"
    assert wl.stats.batch_size == 1.5 and wl.stats.batches == 2
    with pytest.raises(ValueError, match="batch 0"):
        Workload.from_batches(tree_model, [(1, 2)])
    with pytest.raises(ValueError):
        Workload.from_batches(tree_model, [])


def test_workload_spec_and_class_validation() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        WorkloadSpec(batch_size=0)
    with pytest.raises(ValueError, match="shape"):
        WorkloadSpec(shape="round")
    assert parse_class("b8-n32-parse") == (8, 32, "parse")
    for bad in ("b7-n32-parse", "b8-n32-round", "8-32-parse", "", None):
        with pytest.raises(ValueError):
            parse_class(bad)
    assert class_distance("b8-n32-parse", "b8-n32-parse") == 0
    assert class_distance("b8-n32-parse", "b32-n16-parse") == 3
    assert class_distance("b8-n32-parse", "b8-n32-chain") == 2


def test_the_encoder_reads_any_knob_from_the_space() -> None:
    knobs = (Knob("flag", (False, True), False, ""), Knob("size", (1, 2, 4, 8), 1, ""),
             Knob("layout", ("a", "b", "c"), "a", ""), Knob("stages", ((8, 6), (4, 3)), (8, 6), ""),
             Knob("fixed", (7,), 7, ""))
    enc = Encoder(knobs, {k.name: k.default for k in knobs})
    assert enc.names == ["flag", "size", "size=1", "size=2", "size=4", "size=8", "layout=a", "layout=b", "layout=c", "stages=(8, 6)",
                         "stages=(4, 3)"]
    row = enc.encode({"flag": True, "size": 4, "layout": "c", "stages": [4, 3]}, (0.5,))
    assert row.tolist() == [1.0, math.log2(5), 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.5]
    assert enc.encode({}).tolist() == [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]  # defaults fill in


def test_the_cost_model_learns_a_knob_that_matters() -> None:
    space = ScheduleSpace(CPU, "float32")
    enc = Encoder(space.knobs, space.default().to_dict())
    rng = np.random.default_rng(0)
    scheds = space.sample(rng, 60)
    y = np.array([0.0 if s.unroll == 4 else 1.0 for s in scheds]) + rng.normal(0, 0.05, 60)
    model = CostModel(seed=0)
    model.fit(np.stack([enc.encode(s.to_dict()) for s in scheds]), y)
    test = space.sample(np.random.default_rng(1), 40)
    mean, std = model.predict(np.stack([enc.encode(s.to_dict()) for s in test]))
    fast = np.array([s.unroll == 4 for s in test])
    assert mean[fast].max() < mean[~fast].min()
    assert std.shape == mean.shape and (std >= 0).all()


def _trials(space: ScheduleSpace, scheds, cost) -> list[Trial]:
    return [Trial(s.to_dict(), True, float(cost(s)), 0.1) for s in scheds]


def test_proposers_give_legal_unmeasured_schedules() -> None:
    space = ScheduleSpace(CPU, "float32")
    for method in ("random", "model"):
        p = make_proposer(method, space, seed=0, features=(1.0,), from_default=True)
        seen: set[str] = set()
        for _ in range(4):
            batch = p.propose(8)
            assert len(batch) == 8
            keys = {schedule_key(s) for s in batch}
            assert len(keys) == 8 and not keys & seen
            assert all(not space.problems(s) for s in batch)
            seen |= keys
            p.observe(_trials(space, batch, lambda s: 1 + s.unroll), (1.0,))
    with pytest.raises(ValueError, match="method"):
        make_proposer("annealing", space, 0, (), True)


def test_proposers_keep_held_knobs() -> None:
    space = ScheduleSpace(CPU, "float32")
    assert len(space.knob("threads").choices) > 1
    for method in ("random", "model"):
        p = make_proposer(method, space, seed=1, features=(1.0,), from_default=True, held={"threads": 2})
        for _ in range(3):
            batch = p.propose(8)
            assert len(batch) == 8 and {s.threads for s in batch} == {2}
            assert all(not space.problems(s) for s in batch)
            p.observe(_trials(space, batch, lambda s: 1 + s.unroll), (1.0,))


def test_the_model_guided_search_finds_a_planted_optimum_sooner_than_random() -> None:
    """On a synthetic cost (no compiling): the fastest schedules have three knobs right."""
    space = ScheduleSpace(CPU, "float32")

    def cost(s) -> float:
        return 1.0 + (s.unroll != 4) + (s.tile_hidden != 32) + 0.5 * (s.weight_layout != "transposed")

    def trials_to_best(p: RandomProposer, budget: int = 128) -> int:
        n = 0
        for _ in range(budget // 8):
            batch = p.propose(8)
            for i, s in enumerate(batch):
                if cost(s) == 1.0:
                    return n + i + 1
            n += len(batch)
            p.observe(_trials(space, batch, cost), ())
        return budget + 1

    # 8 seeds: the space has ~2e11 schedules (the medians measured 56.5 vs 115 trials); the
    # margin asked here (1.5x) leaves room for another scikit-learn's trees
    guided = [trials_to_best(ModelProposer(space, np.random.default_rng(s), (), from_default=False, seed=s))
              for s in range(8)]
    random = [trials_to_best(RandomProposer(space, np.random.default_rng(s))) for s in range(8)]
    assert np.median(guided) * 1.5 <= np.median(random), (guided, random)


def test_a_failed_trial_is_learned_as_slow() -> None:
    space = ScheduleSpace(CPU, "float32")
    p = ModelProposer(space, np.random.default_rng(0), (), from_default=True)
    bad = replace(space.default(), unroll=8)
    p.observe([Trial(bad.to_dict(), False, None, 0.1, "compile failed"),
               Trial(replace(space.default(), unroll=2).to_dict(), True, 0.9, 0.1)], ())
    X, y = p._training_set()
    assert y[1] == pytest.approx(max(0.0, math.log(0.9)) + math.log(4.0))
