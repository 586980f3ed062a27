"""A contender inside a worker process: a Cortex executable or a peer, built for one group of
points, with the calls the runner times.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. The runner sends a
:class:`ContenderSpec` and a group (a model at one width, :class:`~cortex.bench.workloads.GroupKey`)
with its points to a worker (:mod:`cortex.bench.worker`); :func:`build` compiles the model
(Cortex) or builds the peer, makes every point's inputs (the same seeded inputs the runner's
reference saw), calls each once and returns the root states for the runner to check. The
timed calls stay here, in :attr:`Built.calls`, until the runner asks for them by name.

Cortex variants (``variants=True``): ``call`` is the executable's public call (the linearizer
included, its cache on: repeated structures); ``call_uncached`` runs the linearizer from
scratch; ``run_prelinearized`` is ``exe.run(batch)`` on a batch linearized outside the call.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from cortex.bench.workloads import GroupKey, build_model, linearize_for, make_inputs, model_spec

Point = tuple[int, int]  # (tokens, batch)


@dataclass(frozen=True)
class ContenderSpec:
    """What a worker builds: ``kind`` "cortex" (``name`` a target) or "peer" (a peer name)."""

    kind: str
    name: str
    threads: int = 0  # 0: every usable CPU
    compile_options: tuple[tuple[str, Any], ...] = ()  # Cortex: extra cortex.compile options
    variants: bool = False  # Cortex: time call_uncached and run_prelinearized too
    label: str = ""  # its name in the results (default: ``name``): two contenders of one target

    @property
    def key(self) -> str:
        """The contender's name in the results, and its worker's."""
        return self.label or self.name


@dataclass
class PointResult:
    """One point's first call: its root states (for the runner's check) or why it failed."""

    status: str = "ok"  # "ok" | "error"
    reason: str = ""
    roots: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Built:
    """A contender built for a group: its status and, per (point, variant), the call to time."""

    status: str = "ok"  # "ok" | "skipped" | "unavailable" | "error"
    reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    points: dict[Point, PointResult] = field(default_factory=dict)
    calls: dict[tuple[Point, str], Callable[[], Any]] = field(default_factory=dict)
    keep: list[Any] = field(default_factory=list)  # executables: closed when dropped

    def close(self) -> None:
        for exe in self.keep:
            close = getattr(getattr(exe, "artifact", None), "close", None)
            if callable(close):
                close()  # stop a CPU target's worker threads now, not at collection
        self.keep.clear()
        self.calls.clear()


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def build(spec: ContenderSpec, group: GroupKey, points: list[Point]) -> Built:
    if spec.kind == "cortex":
        return _build_cortex(spec, group, points)
    if spec.kind == "peer":
        return _build_peer(spec, group, points)
    raise ValueError(f"unknown contender kind {spec.kind!r}")


def _inputs(group: GroupKey, model: Any, point: Point) -> Any:
    tokens, batch = point
    width = model.params["U"].shape[1] if group.model == "DAGRNN" else 0
    return make_inputs(group.model, tokens, batch, vocab=group.vocab, width=width, seed=group.seed)


# ------------------------------------------------------------------ Cortex


def target_state(target: str) -> tuple[str, str]:
    """("ok", "") when ``target`` resolves and is runnable here, else (status, reason)."""
    import cortex

    try:
        resolved, _ = cortex.resolve_target(target)
    except cortex.CortexError as exc:
        return "unavailable", _error(exc)
    runnable = resolved.runnable()
    if not runnable:
        return "unavailable", f"target {target!r} is enabled but not runnable here: {runnable.reason}"
    return "ok", ""


def _program_info(exe: Any) -> dict[str, Any]:
    """The compiled program's params (MiB, precomputed tables included), whether it reads
    level 1 from tables, and its thread count when the target has one."""
    from cortex.core.loopir import shape_function

    nbytes = sum(int(np.prod(shape_function(b.shape)({}))) * np.dtype(b.dtype).itemsize
                 for b in exe.program.buffers if b.role == "param")
    info = {"param_mib": round(nbytes / 2**20, 1),
            "level1_tables": any(c.name == "preterminal" for c in exe.graph.cases)}
    threads = getattr(exe.artifact, "threads", None)
    if isinstance(threads, int):
        info["cortex_threads"] = threads
    return info


@contextlib.contextmanager
def _disk_caches_off() -> Iterator[None]:
    """Cortex's on-disk compile caches switched off (``CORTEX_CACHE=0``) for the block."""
    from cortex.core.diskcache import ENV_SWITCH

    before = os.environ.get(ENV_SWITCH)
    os.environ[ENV_SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[ENV_SWITCH]
        else:
            os.environ[ENV_SWITCH] = before


def _build_cortex(spec: ContenderSpec, group: GroupKey, points: list[Point]) -> Built:
    import cortex
    from cortex.core.linearize import clear_cache, set_cache

    state, why = target_state(spec.name)
    if state != "ok":
        return Built(state, why)
    options = dict(spec.compile_options)
    if spec.threads:
        resolved, _ = cortex.resolve_target(spec.name)
        if any(o.name == "threads" for o in resolved.options):
            options.setdefault("threads", spec.threads)
    model = build_model(group)
    t0 = time.perf_counter()
    try:
        with _disk_caches_off():  # compile_s is a cold compile, whatever an earlier run cached
            exe = cortex.compile(model, target=spec.name, **options)
    except Exception as exc:  # noqa: BLE001 - a failing backend is recorded, not fatal
        status = "unavailable" if isinstance(exc, cortex.NotYetImplementedError) else "error"
        return Built(status, _error(exc))
    built = Built(info={"compile_s": time.perf_counter() - t0, "compile_cache": "off (cold)",
                        "compile_options": options, "schedule_source": exe.schedule_source,
                        **_program_info(exe)})
    built.keep.append(exe)
    for point in points:
        inputs = _inputs(group, model, point)
        structures = inputs.structures
        res = built.points[point] = PointResult()
        try:
            t1 = time.perf_counter()
            out = exe(structures)  # the first call: computes its tokens' table rows, if any
            res.info["first_call_ms"] = (time.perf_counter() - t1) * 1e3
            rows = exe.table_rows
            if rows is not None:
                res.info["table_rows_filled"] = list(rows)
            res.roots = {s: out.root(s) for s in out.states}
        except Exception as exc:  # noqa: BLE001
            res.status, res.reason = "error", _error(exc)
            continue
        built.calls[(point, "call")] = lambda exe=exe, s=structures: exe(s)
        if spec.variants:
            def uncached(exe: Any = exe, s: Any = structures) -> Any:
                set_cache(False)
                try:
                    return exe(s)
                finally:
                    set_cache(True)

            clear_cache()
            batch = exe.linearize(structures)
            built.calls[(point, "call_uncached")] = uncached
            built.calls[(point, "run_prelinearized")] = lambda exe=exe, b=batch: exe.run(b)
    return built


# ------------------------------------------------------------------ peers


def _build_peer(spec: ContenderSpec, group: GroupKey, points: list[Point]) -> Built:
    from cortex.bench.peers import peer_for

    peer = peer_for(spec.name, group.model)
    if peer is None:
        return Built("unavailable", f"no peer {spec.name!r} implements {group.model}")
    missing = peer.missing()
    if missing is not None:
        return Built("skipped", missing)
    info: dict[str, Any] = {"device": peer.device}
    if peer.needs == "dynet":
        from cortex.bench.peers import dynet_peer

        reason = dynet_peer.available()
        if reason is not None:
            return Built("skipped", reason)
    if peer.needs == "torch":
        import torch

        from cortex.bench.environment import usable_cpus

        torch.set_num_threads(spec.threads or usable_cpus())
        if peer.device == "cuda" and not torch.cuda.is_available():
            return Built("skipped", "PyTorch sees no CUDA device")
    model = build_model(group)
    built = Built(info=info)
    for point in points:
        res = built.points[point] = PointResult()
        try:
            inputs = _inputs(group, model, point)
            made = peer.build(model, linearize_for(model, inputs.structures), inputs.raw)
            if isinstance(made, tuple):
                made, res.info["compile_s"], res.info["compile_cold"] = made
            res.roots = dict(made())
        except Exception as exc:  # noqa: BLE001 - a broken peer is recorded, not fatal
            res.status, res.reason = "error", _error(exc)
            continue
        built.calls[(point, "call")] = made
    return built


def describe(spec: ContenderSpec, group: GroupKey) -> str:
    return f"{spec.kind} {spec.name} on {group.model} h{model_spec(group.model).hidden(group.hidden)}"
