"""Model parameters: binding to a graph (derived params), ``.npz`` files, PyTorch import.

Pipeline position: beside the frontend. ``bind_params`` turns a model's named arrays into the
complete table a traced (and optimised) :class:`~cortex.core.frontend.graph.RecursiveGraph` needs,
computing the *derived* params that graph passes introduced (stacked gate matrices, embedding
tables premultiplied by a weight) from their recipes. The reference evaluator and every backend
call it once per compile/bind, never per call.

PyTorch import maps well-known modules' ``state_dict``\\s onto zoo models (no torch import
here; tensors are converted with ``.detach().cpu().numpy()``):

* ``nn.LSTM`` (1 layer, unidirectional) -> ``SeqLSTM``: rows of ``weight_ih_l0`` /
  ``weight_hh_l0`` are gates ``i, f, g, o`` -> ``W_*`` / ``U_*``; ``b_* = bias_ih + bias_hh``.
* ``nn.GRU`` -> ``SeqGRU``: rows ``r, z, n``; ``b_r, b_z = bias_ih + bias_hh``; ``b_in`` and
  ``b_hn`` stay separate (the reset gate multiplies ``U_n h + b_hn``).
* The common child-sum Tree-LSTM module (``ioux, iouh: Linear(.., 3*hidden)`` split ``i, o, u``;
  ``fx, fh: Linear(.., hidden)``; optional ``emb: Embedding``) -> ``ChildSumTreeLSTM``:
  ``W_{i,o,u} = ioux.weight`` row blocks, ``U_{i,o,u} = iouh.weight`` row blocks,
  ``b_{i,o,u} = ioux.bias + iouh.bias`` blocks, ``W_f = fx.weight``, ``U_f = fh.weight``,
  ``b_f = fx.bias + fh.bias``, ``E = emb.weight``. (That module feeds a leaf zero child
  states, so its leaf equals ours: ``iouh(0) = iouh.bias`` and ``f * 0`` vanishes.)
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
# PyTorch state dicts
# --------------------------------------------------------------------------------------------


def _np(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t, dtype=np.float64)


def _get(sd: Mapping[str, Any], key: str, what: str) -> np.ndarray:
    if key not in sd:
        raise ParamError(f"{what}: state dict has no {key!r} (keys: {sorted(sd)})")
    return _np(sd[key])


def _rnn_blocks(model: "Model", sd: Mapping[str, Any], gates: tuple[str, ...], what: str):
    extra = [k for k in sd if k.endswith("_reverse") or "_l1" in k or k.startswith("weight_hr")]
    if extra:
        raise ParamError(f"{what}: only 1-layer, unidirectional, projection-free modules map; found {extra}")
    n = len(gates)
    w_ih, w_hh = _get(sd, "weight_ih_l0", what), _get(sd, "weight_hh_l0", what)
    zeros = np.zeros(n * model.hidden)
    b_ih = _get(sd, "bias_ih_l0", what) if "bias_ih_l0" in sd else zeros
    b_hh = _get(sd, "bias_hh_l0", what) if "bias_hh_l0" in sd else zeros
    if w_ih.shape != (n * model.hidden, model.input_size) or w_hh.shape != (n * model.hidden, model.hidden):
        raise ParamError(
            f"{what}: weight_ih_l0 {w_ih.shape} / weight_hh_l0 {w_hh.shape} don't fit "
            f"hidden={model.hidden}, input={model.input_size}"
        )
    split = lambda a: dict(zip(gates, np.split(a, n, axis=0)))  # noqa: E731
    return split(w_ih), split(w_hh), split(b_ih), split(b_hh)


def _with_embedding(model: "Model", values: dict, embedding: Any, what: str) -> dict:
    if "E" in model.param_specs:
        if embedding is None:
            raise ParamError(f"{what}: the model takes token ids; pass embedding= (e.g. nn.Embedding.weight)")
        values["E"] = _np(embedding)
    elif embedding is not None:
        raise ParamError(f"{what}: the model takes dense features; it has no embedding table")
    return values


def load_torch_lstm(model: "Model", state_dict: Mapping[str, Any], *, embedding: Any = None) -> None:
    """Load an ``nn.LSTM(input, hidden)`` state dict into a :class:`~cortex.models.SeqLSTM`."""
    w, u, bi, bh = _rnn_blocks(model, state_dict, ("i", "f", "g", "o"), "load_torch_lstm")
    values = {}
    for k in ("i", "f", "g", "o"):
        values[f"W_{k}"], values[f"U_{k}"], values[f"b_{k}"] = w[k], u[k], bi[k] + bh[k]
    set_params(model, _with_embedding(model, values, embedding, "load_torch_lstm"))


def load_torch_gru(model: "Model", state_dict: Mapping[str, Any], *, embedding: Any = None) -> None:
    """Load an ``nn.GRU(input, hidden)`` state dict into a :class:`~cortex.models.SeqGRU`."""
    w, u, bi, bh = _rnn_blocks(model, state_dict, ("r", "z", "n"), "load_torch_gru")
    values = {}
    for k in ("r", "z", "n"):
        values[f"W_{k}"], values[f"U_{k}"] = w[k], u[k]
    values["b_r"], values["b_z"] = bi["r"] + bh["r"], bi["z"] + bh["z"]
    values["b_in"], values["b_hn"] = bi["n"], bh["n"]
    set_params(model, _with_embedding(model, values, embedding, "load_torch_gru"))


def load_torch_childsum(model: "Model", state_dict: Mapping[str, Any], *, prefix: str = "",
                        embedding: Any = None) -> None:
    """Load the common PyTorch child-sum Tree-LSTM module (``ioux, iouh, fx, fh``; optional
    ``emb``) into a :class:`~cortex.models.ChildSumTreeLSTM` (mapping in the module docstring)."""
    what = "load_torch_childsum"
    sd = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    get = lambda k: _get(sd, k, what)  # noqa: E731
    w_iou, u_iou = np.split(get("ioux.weight"), 3), np.split(get("iouh.weight"), 3)
    b_iou = np.split(get("ioux.bias") + get("iouh.bias"), 3)
    values = {}
    for j, k in enumerate(("i", "o", "u")):
        values[f"W_{k}"], values[f"U_{k}"], values[f"b_{k}"] = w_iou[j], u_iou[j], b_iou[j]
    values["W_f"], values["U_f"] = get("fx.weight"), get("fh.weight")
    values["b_f"] = get("fx.bias") + get("fh.bias")
    if embedding is None and "emb.weight" in sd:
        embedding = sd["emb.weight"]
    set_params(model, _with_embedding(model, values, embedding, what))
