"""Model parameters: binding to a graph (derived params), setting them, ``.npz`` files.

Pipeline position: beside the frontend. ``bind_params`` turns a model's named arrays into the
complete table a traced (and optimised) :class:`~cortex.core.frontend.graph.RecursiveGraph` needs,
computing the *derived* params that graph passes introduced (stacked gate matrices, embedding
tables premultiplied by a weight) from their recipes. The reference evaluator and every backend
call it once per compile/bind, never per call.

PyTorch and DGL ``state_dict`` importers are in :mod:`cortex.models.importers` (they know the
zoo's parameter names); ``load_torch_lstm``, ``load_torch_gru`` and ``load_torch_childsum`` can
still be imported from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Mapping

import numpy as np

from cortex.core.frontend.graph import RecursiveGraph
from cortex.core.frontend.model_errors import ParamError
from cortex.core.runtime.hostmem import aligned_empty, sparse_zeros

if TYPE_CHECKING:
    from cortex.core.frontend.model import Model


# --------------------------------------------------------------------------------------------
# Binding params to a graph
# --------------------------------------------------------------------------------------------


def compute_derived(recipe: str, args: list[np.ndarray], dtype: Any = np.float64) -> np.ndarray:
    """Evaluate one derived-param recipe in ``dtype`` (float64 unless the caller says so)."""
    args = [np.asarray(a, dtype=dtype) for a in args]
    if recipe == "concat0":
        return np.concatenate(args, axis=0)
    if recipe == "embed_linear":
        # the table is a param of the compiled program: made on a cache line (no second copy
        # when a host runtime adopts it, see cortex.core.runtime.hostmem)
        out = aligned_empty((args[0].shape[0], args[1].shape[0]), dtype)
        np.matmul(args[0], args[1].T, out=out)
        if len(args) == 3:
            out += args[2]
        return out
    raise ValueError(f"unknown derived-param recipe {recipe!r}")


def bind_params(graph: RecursiveGraph, params: Mapping[str, Any], dtype: Any = None,
                compute_dtype: Any = np.float64,
                only: Collection[str] | None = None,
                defer: Collection[str] = ()) -> dict[str, np.ndarray]:
    """All params ``graph`` reads (its own and derived ones), checked against their specs.

    ``dtype=None`` keeps every param in its declared dtype (derived ones are computed in
    ``compute_dtype`` and rounded once); ``dtype=np.float64`` gives the reference evaluator's
    table. Derived params are computed in ``compute_dtype``: float64 by default; an executable
    computing in float32 passes float32 (a derived table in float32 is what its kernel would
    compute anyway, at half the time and memory of the float64 product). ``only``: return just
    these names (every param is still checked; the others are only computed when a derived
    param needs them). ``defer``: derived params returned as zeros that take no memory until
    written (:func:`~cortex.core.runtime.hostmem.sparse_zeros`), for :mod:`cortex.core.runtime.token_tables`
    to fill row by row; no param that is computed here may read one.
    """
    return bind_exact(graph, params, dtype, compute_dtype, only, defer)[0]


def bind_exact(graph: RecursiveGraph, params: Mapping[str, Any], dtype: Any = None,
               compute_dtype: Any = np.float64, only: Collection[str] | None = None,
               defer: Collection[str] = ()) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`bind_params`' table and, second, every param that is not deferred as the derived
    recipes read it: the model's own arrays (not copies) and derived ones in ``compute_dtype``."""
    cdt = np.dtype(compute_dtype)
    out: dict[str, np.ndarray] = {}
    exact: dict[str, np.ndarray] = {}
    for spec in graph.params:
        if spec.name not in params:
            raise ParamError(f"graph {graph.name!r} needs parameter {spec.name!r}; not given")
        arr = np.asarray(params[spec.name])
        if arr.shape != spec.shape:
            raise ParamError(
                f"graph {graph.name!r}: parameter {spec.name!r} has shape {arr.shape}, expected {spec.shape}"
            )
        exact[spec.name] = arr
        if only is None or spec.name in only:
            out[spec.name] = arr.astype(dtype or spec.dtype)  # a copy: never the model's array
    by_token: dict[str, np.ndarray] | None = None
    for d in graph.derived:
        want = np.dtype(dtype or d.dtype)
        if d.name in defer:
            if only is None or d.name in only:
                out[d.name] = sparse_zeros(d.shape, want)
            continue
        if any(a in defer for a in d.args):  # (a leaf_state's args are what the leaf reads)
            raise ValueError(f"derived param {d.name!r} reads a deferred table; defer it too")
        if d.recipe == "leaf_state":
            if by_token is None:  # every state of the leaf case at once, for every token id
                by_token = leaf_states_of(graph, exact, cdt)
            value = by_token[d.attr("state")]
        else:
            value = compute_derived(d.recipe, [exact[a] for a in d.args], cdt)
        if value.shape != d.shape:
            raise ParamError(f"derived param {d.name!r}: recipe gave {value.shape}, expected {d.shape}")
        exact[d.name] = value
        if only is None or d.name in only:
            # fresh already when computed in the wanted dtype (no second copy of a big table)
            out[d.name] = value if value.dtype == want else value.astype(want)
    return out, exact


def leaf_states_of(graph: RecursiveGraph, table: Mapping[str, np.ndarray], dtype: np.dtype,
                   tokens: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The ``leaf_state`` recipe: the leaf case run on every token id (or on ``tokens``: one
    row per id, in that order), in ``dtype``; ``table`` holds (at least) what the leaf reads."""
    from cortex.core.frontend.reference import leaf_states  # the oracle; it imports this module

    reads = {v.attr("name") for v in graph.case("leaf").values if v.op == "param"}
    return leaf_states(graph, {name: np.asarray(table[name], dtype=dtype) for name in reads}, tokens)


# --------------------------------------------------------------------------------------------
# Setting, saving and loading a model's params
# --------------------------------------------------------------------------------------------


def _check_and_cast(model: "Model", values: Mapping[str, Any], *, source: str, strict_dtype: bool) -> dict[str, np.ndarray]:
    specs = model.param_specs
    missing = sorted(set(specs) - set(values))
    extra = sorted(set(values) - set(specs))
    if missing or extra:
        raise ParamError(
            f"{model.name}: {source} does not match the model's parameters "
            f"(missing {missing}, unexpected {extra})"
        )
    out = {}
    for name, spec in specs.items():
        arr = np.asarray(values[name])
        if arr.shape != spec.shape:
            raise ParamError(
                f"{model.name}: {source}: parameter {name!r} has shape {arr.shape}, model expects {spec.shape}"
            )
        if arr.dtype.kind != "f":
            raise ParamError(f"{model.name}: {source}: parameter {name!r} has non-float dtype {arr.dtype}")
        if strict_dtype and arr.dtype.name != spec.dtype:
            raise ParamError(
                f"{model.name}: {source}: parameter {name!r} is {arr.dtype.name}, the model is "
                f"{spec.dtype}; build the model with dtype={arr.dtype.name!r} or convert the file"
            )
        out[name] = np.ascontiguousarray(arr, dtype=spec.dtype)
    return out


def set_params(model: "Model", values: Mapping[str, Any]) -> None:
    """Replace all of ``model``'s params (shapes must match; floats are cast to the model dtype)."""
    model.params.update(_check_and_cast(model, values, source="set_params", strict_dtype=False))


def save_npz(model: "Model", path: str | Path) -> None:
    """Write every param to an uncompressed ``.npz`` (one array per param name)."""
    np.savez(path, **model.params)


def load_npz(model: "Model", path: str | Path) -> None:
    """Load params saved by :func:`save_npz`; names, shapes and dtypes must match exactly."""
    with np.load(path, allow_pickle=False) as f:
        values = {k: f[k] for k in f.files}
    model.params.update(_check_and_cast(model, values, source=f"file {str(path)!r}", strict_dtype=True))


# --------------------------------------------------------------------------------------------
# PyTorch state dicts: cortex.models.importers (the old names keep working from here)
# --------------------------------------------------------------------------------------------

_MOVED = ("load_torch_lstm", "load_torch_gru", "load_torch_childsum",
          "load_torch_binary_treelstm", "load_dgl_treelstm", "load_torch_treegru")


def __getattr__(name: str) -> Any:
    if name in _MOVED:  # imported on use: the importers know the zoo, which imports this module
        from cortex.models import importers

        return getattr(importers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
