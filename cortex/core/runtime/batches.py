"""Batches the executable makes for itself: corpus streaming (``exe.map``), warm-up batches,
and new params checked against the compiled ones (``exe.update_params``).

Pipeline position: host side, around :meth:`cortex.core.runtime.executable.Executable.__call__`.

* :func:`stream` reads a corpus ``batch_size`` structures at a time (``itertools.islice``: only
  one batch is held), calls the executable once per batch and yields each input's declared
  outputs in order (``Outputs.for_input``), with an optional progress bar that shows inputs/s
  and nodes/s (:mod:`cortex.core.runtime.progress`).
* :func:`warmup_batches` makes synthetic inputs that fit the model (its arity, vocabulary or
  feature size) with at least the node counts the artifact asks for (``warmup_nodes``, e.g. the
  OpenCL runtime's two execution forms), so each form's kernels are built before real calls.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import numpy as np

from cortex.core.errors import int_arg
from cortex.core.frontend.model_errors import ParamError
from cortex.core.runtime.progress import bar

if TYPE_CHECKING:
    from cortex.core.runtime.executable import Executable

#: Node counts of the warm-up batches when the artifact names none: one node, and a batch
#: large enough for a host's parallel paths and a device's per-level form.
WARMUP_NODES = (1, 2048)


def stream(exe: "Executable", structures: Iterable[Any], *, batch_size: int = 64,
           progress: bool = False, total: int | None = None,
           vocab: Any = None) -> Iterator[dict[str, np.ndarray]]:
    """``exe.map``: see :meth:`~cortex.core.runtime.executable.Executable.map`."""
    batch_size = int_arg("Executable.map", "batch_size", batch_size)  # Cortex's error if not
    if total is None and hasattr(structures, "__len__"):
        total = len(structures)  # type: ignore[arg-type]
    return _stream(exe, iter(structures), batch_size, progress, total, vocab)


def _stream(exe: "Executable", it: Iterator[Any], batch_size: int, progress: bool,
            total: int | None, vocab: Any) -> Iterator[dict[str, np.ndarray]]:
    with bar(total, f"cortex: {exe.model_name}", "inputs", progress if progress else False) as shown:
        nodes = 0
        while True:
            chunk = list(itertools.islice(it, batch_size))
            if not chunk:
                return
            out = exe(chunk, vocab=vocab)
            nodes += out.num_nodes
            elapsed = max(_elapsed(shown), 1e-9)
            shown.update(len(chunk), nodes_per_s=f"{nodes / elapsed:,.0f}")
            for b in range(out.batch_size):
                yield out.for_input(b)


def _elapsed(shown: Any) -> float:
    import time

    return time.perf_counter() - shown.start


def _structure(nodes: int, arity: int | None, vocab: int | None, features: int | None) -> Any:
    """One input of about ``nodes`` nodes (at least one) that fits the model."""
    from cortex.core.linearize import EdgeList, Sequence
    from cortex.testing.structures import balanced  # a full k-ary tree, leaves first

    if arity == 1:
        data = np.zeros((nodes, features)) if features else np.zeros(nodes, dtype=np.int64)
        return Sequence(data)
    k, depth = arity or 2, 0
    while (k ** (depth + 2) - 1) // (k - 1) <= nodes:
        depth += 1
    children = balanced(depth, k) if nodes > 1 else [[]]
    edges = [(v, c) for v, cs in enumerate(children) for c in cs]
    words = np.zeros(len(children), dtype=np.int64) if vocab else None
    feats = np.zeros((len(children), features)) if features else None
    return EdgeList(len(children), edges, words=words, features=feats)


def warmup_batches(exe: "Executable") -> list[list[Any]]:
    """One batch per node count the artifact names (``artifact.warmup_nodes``, else
    :data:`WARMUP_NODES`): copies of a small tree (a sequence for a sequence model) with
    token 0 or zero features, at least that many nodes in all."""
    opts = exe._linearize
    arity, vocab, features = opts["arity"], opts["vocab_size"], opts["feature_dim"]
    out = []
    for want in getattr(exe.artifact, "warmup_nodes", WARMUP_NODES):
        if want <= 1:
            out.append([_structure(1, arity, vocab, features)])
            continue
        one = _structure(min(want, 64), arity, vocab, features)
        size = exe.linearize([one]).num_nodes
        out.append([one] * (-(-int(want) // max(size, 1))))
    return out


def merged_params(exe: "Executable", values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The executable's params with ``values`` in place of some or all of them, each checked
    against the compiled one (name, shape, a float array) and cast to its dtype."""
    if not isinstance(values, Mapping):
        raise TypeError(f"update_params takes a mapping of param name to array, or a model; "
                        f"got {type(values).__name__}")
    old = exe.params_snapshot
    unknown = sorted(set(values) - set(old))
    if unknown:
        raise ParamError(f"{exe.model_name}: update_params: no params named {unknown}; the "
                         f"model has {sorted(old)}")
    out = dict(old)
    for name, value in values.items():
        a = np.asarray(value)
        if a.shape != old[name].shape:
            raise ParamError(f"{exe.model_name}: update_params: {name!r} has shape {a.shape}, "
                             f"the compiled model has {old[name].shape}")
        if a.dtype.kind != "f":
            raise ParamError(f"{exe.model_name}: update_params: {name!r} is {a.dtype}, not a float array")
        out[name] = np.ascontiguousarray(a, dtype=old[name].dtype)
    return out
