"""One tree on several work-groups (``cortex.plugins.opencl.shared``, the knob ``level_groups``):
the one-group kernel's work-group loops become units claimed at run time, each loop ending in a
wait for every unit. Without a device: the derivation on the interpreter (its groups in turn) and
the rendered claims. With one: outputs bit-identical to the one-work-group kernel on every zoo
family, more groups than compute units, and one PoCL worker for two groups (the second starts
after the first ended and finds every unit claimed) all complete.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cortex.core import loopir as ir
from cortex.core.loopir import interpret
from cortex.core.loopir.verify import verify
from cortex.core.plugin import hostinfo
from cortex.plugins.opencl import forms, shared, vectors

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))
from test_loopir_examples import inputs, random_batch, tree_lstm  # noqa: E402

REQUIRED = "opencl" in {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",")}


def _cpu_program() -> ir.Program:
    """A TreeLSTM per-level program as the CPU schedule maps it: hidden loops serial in the
    work-item, nodes on work-groups of one work-item."""
    program = tree_lstm(form="per_level", dtype="float64", H=4)

    def serial(n: ir.Node) -> ir.Node | None:
        hidden = isinstance(n, ir.For) and n.var in ("j", "jl") and n.kind == "parallel"
        return replace(n, kind="serial") if hidden else None

    return forms.to_work_groups(ir.transform(program, serial))


def test_the_shared_kernel_claims_every_work_group_loop_and_computes_the_same():
    program = _cpu_program()
    k = shared.shared_kernel(program)
    loops = [n for n in ir.walk(k.body) if isinstance(n, ir.For) and n.kind == "gpu_group"]
    assert loops and all(shared.claimed(n) for n in loops)
    assert not any(isinstance(n, ir.Barrier) for n in ir.walk(k.body))  # the waits are the barriers
    checked = verify(replace(program, kernels=(k,), host=(ir.Launch(k.name),)))
    rng = np.random.default_rng(1)
    bufs, sizes = inputs(random_batch(rng, n_trees=3, max_leaves=6, arity=2), program, rng)
    want = interpret.run(program, bufs, sizes)["h"]
    np.testing.assert_allclose(interpret.run(checked, bufs, sizes)["h"], want, rtol=1e-12, atol=1e-12)
    # the leaves' loops once, then every claimed loop of the level body per level
    per_level = sum(1 for n in ir.walk(k.body) if isinstance(n, ir.For) and n.kind == "serial"
                    for m in ir.walk(n.body) if shared.claimed(m))
    top = len(loops) - per_level
    levels = sizes["L"] - 1
    assert shared.claim_slots(k, sizes) == top + per_level * levels


def test_a_group_of_several_work_items_gets_no_shared_kernel():
    with pytest.raises(ValueError, match="several work-items"):
        shared.shared_kernel(forms.to_work_groups(tree_lstm(form="per_level", dtype="float64", H=4)))


def test_the_rendered_kernel_claims_units_and_waits_for_them():
    program = _cpu_program()
    text = vectors.render(shared.with_shared_kernel(program))
    kernel = text[text.index(f"_{shared.SHARED_KERNEL}("):]
    head = kernel.split("\n", 1)[0]
    assert head.endswith(f"__global volatile int* {shared.SYNC}) {{")
    assert f"atomic_inc(&{shared.SYNC}[{shared.SLOT}])" in kernel
    assert f"atomic_add(&{shared.SYNC}[{shared.SLOT} + 1]" in kernel
    assert "barrier(" not in kernel
    assert kernel.rstrip().endswith(f"{shared.SYNC}[0] = 0;\n  }}\n}}")  # the last group zeroes
    assert "atomic_inc" not in text[: text.index(f"_{shared.SHARED_KERNEL}(")]  # no other kernel claims


# ------------------------------------------------------------------------------ on a device

_found = hostinfo.opencl_devices()
device = pytest.mark.skipif(not _found.devices and not REQUIRED,
                            reason=f"OpenCL unavailable: no OpenCL device: {_found.error}")

#: model -> batches: b1, two unequal trees, b10 (the bench's inputs, small)
FAMILIES = ("TreeLSTM", "TreeGRU", "ChildSumTreeLSTM", "TreeFC", "MVRNN", "DAGRNN", "SeqLSTM")


_COMPILED: dict[tuple[str, int], tuple] = {}


def _run(name: str, level_groups: int, hidden: int = 16) -> list[dict]:
    """Each call's form, work-groups, and whether its outputs equal those of the same
    executable's one-work-group kernel (one build per model: the kernels are the same)."""
    import cortex
    from cortex.bench.workloads import GroupKey, build_model, make_inputs

    key = (name, level_groups)
    if key not in _COMPILED:
        model = build_model(GroupKey(name, hidden, None, 7, 0))
        exe = cortex.compile(model, target="opencl", schedule={"tree_groups": 1, "level_groups": level_groups})
        _COMPILED[key] = (model, exe)
    model, exe = _COMPILED[key]
    art = exe.artifact
    assert shared.SHARED_KERNEL in art.kernels and art.level_groups == level_groups
    width = model.params["U"].shape[1] if name == "DAGRNN" else 0
    out = []
    for b in (1, 3):
        batch = exe.linearize(make_inputs(name, 12, b, vocab=7, width=width, seed=b).structures)
        art.level_groups = 1  # the one-work-group kernel of the same build
        want = exe.run(batch)
        assert art.last_form == "single_group"
        art.level_groups = level_groups
        for _ in range(2):  # the second call starts from the counters the first left
            got = exe.run(batch)
            out.append({"form": art.last_form, "groups": art.last_groups,
                        "same": all(np.array_equal(got.nodes(s), want.nodes(s)) for s in got.states)})
    return out


@device
@pytest.mark.parametrize("name", FAMILIES)
def test_shared_levels_equal_the_one_group_kernel_bit_for_bit(name):
    for row in _run(name, 2):
        assert row == {"form": "shared_levels", "groups": 2, "same": True}


@device
def test_more_groups_than_compute_units_complete():
    for row in _run("TreeLSTM", 4):
        assert row == {"form": "shared_levels", "groups": 4, "same": True}


WORKER = """
import json, sys
sys.path.insert(0, {tests!r})
from test_opencl_shared_levels import _run
print(json.dumps(_run("TreeLSTM", 2)))
"""


@device
def test_one_worker_thread_runs_two_groups_to_the_end():
    """PoCL with one worker thread runs the second group after the first one ended: it finds
    every unit claimed and done and falls through (no wait on a group that never started)."""
    env = dict(os.environ, POCL_MAX_PTHREAD_COUNT="1")
    code = WORKER.format(tests=str(Path(__file__).resolve().parent))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert rows and all(r == {"form": "shared_levels", "groups": 2, "same": True} for r in rows)
