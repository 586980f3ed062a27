"""PyTorch and DGL weights for the zoo: each importer maps one well-known ``state_dict`` layout
onto a zoo model's params.

Pipeline position: beside the frontend, before ``cortex.compile``: a model trained elsewhere is
loaded here and compiled like any other. No torch import: tensors are converted with
``.detach().cpu().numpy()`` and NumPy arrays are taken as they are. Every importer checks the
model's class and variant first (the message names the importer or the constructor keywords
that fit), then every key and shape it reads (``ParamError`` names the key), and rejects keys of
its layout it does not understand rather than ignoring them. ``prefix=None`` finds the module
inside a bigger model's ``state_dict`` by a key the layout always has (``leaf_module.cx.weight``,
``cell.W_iou.weight``...). ``embedding=`` gives the token table; otherwise one key named like an
embedding (``emb``, ``embedding``, ``embeddings``, ``word_embedding`` + ``.weight``) is used.

* ``load_torch_lstm``: ``nn.LSTM`` (1 layer, unidirectional) -> ``SeqLSTM``;
* ``load_torch_gru``: ``nn.GRU`` (1 layer, unidirectional) -> ``SeqGRU``;
* ``load_torch_childsum``: the child-sum Tree-LSTM module ``ioux, iouh, fx, fh`` ->
  ``ChildSumTreeLSTM``;
* ``load_torch_binary_treelstm``: Tai et al.'s binary Tree-LSTM as its PyTorch ports name it,
  ``leaf_module.{cx,ox}`` and ``composer.{ilh,irh,...}`` ->
  ``TreeLSTM(leaf="linear", forget_bias="per_child")``;
* ``load_dgl_treelstm``: DGL's Tree-LSTM example, ``W_iou, U_iou, b_iou, U_f`` ->
  ``TreeLSTM(forget_bias="per_child")`` (its N-ary cell) or ``ChildSumTreeLSTM`` (its
  child-sum cell);
* ``load_torch_treegru``: the TreeGRU module of ``docs/models.md``, ``W_e, U_rz, U_n`` ->
  ``TreeGRU``.

``docs/models.md`` gives every key-to-param table.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from cortex.core.frontend.model import Model
from cortex.core.frontend.model_errors import ParamError
from cortex.core.frontend.params import set_params
from cortex.models.sequence import SeqGRU, SeqLSTM
from cortex.models.tree_gru import TreeGRU
from cortex.models.tree_lstm import ChildSumTreeLSTM, TreeLSTM

__all__ = ["load_torch_lstm", "load_torch_gru", "load_torch_childsum",
           "load_torch_binary_treelstm", "load_dgl_treelstm", "load_torch_treegru"]

#: Which importers load into which zoo class (for the message when the model does not fit).
FOR_CLASS = {
    "SeqLSTM": "load_torch_lstm (nn.LSTM)",
    "SeqGRU": "load_torch_gru (nn.GRU)",
    "ChildSumTreeLSTM": "load_torch_childsum (ioux, iouh, fx, fh) or load_dgl_treelstm (DGL's "
                        "ChildSumTreeLSTMCell)",
    "TreeLSTM": "load_torch_binary_treelstm (Tai et al.'s leaf_module/composer) or "
                "load_dgl_treelstm (DGL's TreeLSTMCell: W_iou, U_iou, b_iou, U_f)",
    "TreeGRU": "load_torch_treegru (W_e, U_rz, U_n)",
}
EMBEDDING_NAMES = ("emb", "embedding", "embeddings", "word_embedding", "word_embeddings")
_VARIANT_ATTRS = {"arity": "arity", "leaf": "leaf_form", "forget_bias": "forget_bias"}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _np(t: Any) -> np.ndarray:
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.asarray(t, dtype=np.float64)


def _get(sd: Mapping[str, Any], key: str, what: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    if key not in sd:
        raise ParamError(f"{what}: state dict has no {key!r} (keys: {sorted(sd)})")
    value = _np(sd[key])
    if shape is not None and value.shape != shape:
        raise ParamError(f"{what}: {key!r} has shape {value.shape}; this model needs {shape}")
    return value


def _bias(sd: Mapping[str, Any], key: str, what: str, size: int) -> np.ndarray:
    """An optional ``Linear`` bias (``bias=False`` modules have none): zeros when absent."""
    return _get(sd, key, what, (size,)) if key in sd else np.zeros(size)


def _expect(model: Any, cls: type, what: str, *, also: str = "", **variant: Any) -> None:
    """``model`` must be a ``cls`` built with ``variant`` (constructor keyword -> value);
    ``also`` names another class the importer loads into, for the message."""
    if not isinstance(model, cls):
        got = type(model).__name__
        hint = f"; for a {got} use {FOR_CLASS[got]}" if got in FOR_CLASS else ""
        wanted = ", ".join(f"{k}={v!r}" for k, v in variant.items())
        raise ParamError(f"{what} loads into a cortex.models.{cls.__name__}"
                         f"{f'({wanted}, ...)' if wanted else ''}{also}, not a {got}{hint}")
    for keyword, want in variant.items():
        have = getattr(model, _VARIANT_ATTRS[keyword])
        if have != want:
            raise ParamError(f"{what}: this layout is a {cls.__name__} with {keyword}={want!r}; "
                             f"the model has {keyword}={have!r}: build it with "
                             f"{cls.__name__}(..., {keyword}={want!r})")


def _module(sd: Mapping[str, Any], anchor: str, prefix: str | None, what: str) -> dict[str, Any]:
    """The keys of the module inside ``sd`` with ``prefix`` removed; ``prefix=None`` finds it
    from the one key ending in ``anchor``."""
    if prefix is None:
        found = sorted(k[:-len(anchor)] for k in sd if k.endswith(anchor)
                       and (len(k) == len(anchor) or k[-len(anchor) - 1] == "."))
        if not found:
            raise ParamError(f"{what}: state dict has no {anchor!r} key, so it is not this "
                             f"layout (keys: {sorted(sd)})")
        if len(found) > 1:
            raise ParamError(f"{what}: several modules of this layout in the state dict "
                             f"(prefixes {found}); choose one with prefix=")
        prefix = found[0]
    return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}


def _no_other_keys(sd: Mapping[str, Any], used: set[str], namespaces: tuple[str, ...],
                   what: str, variant: str) -> None:
    """Keys under the layout's ``namespaces`` that were not read mean a variant of the layout
    this importer does not map (so it refuses, rather than ignore weights)."""
    extra = sorted(k for k in sd if k.startswith(namespaces) and k not in used)
    if extra:
        raise ParamError(f"{what}: unexpected keys {extra}: {variant}")


def _embedding(model: Model, values: dict[str, np.ndarray], embedding: Any,
               sd: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
    """``values`` plus ``E``: ``embedding=``, else the one embedding-named key of ``sd``."""
    if "E" not in model.param_specs:
        if embedding is not None:
            raise ParamError(f"{what}: the model takes dense features; it has no embedding table")
        return values
    if embedding is None:
        found = sorted(k for k in sd if k.endswith(".weight")
                       and k[:-len(".weight")].rsplit(".", 1)[-1] in EMBEDDING_NAMES)
        if len(found) != 1:
            why = f"several candidates {found}" if found else "none in the state dict"
            raise ParamError(f"{what}: the model takes token ids and needs its embedding table "
                             f"({why}); pass embedding= (e.g. nn.Embedding.weight)")
        embedding = sd[found[0]]
    values["E"] = _np(embedding)
    return values


def _blocks(a: np.ndarray, n: int, axis: int = 0) -> list[np.ndarray]:
    return np.split(a, n, axis=axis)


# --------------------------------------------------------------------------------------------
# nn.LSTM, nn.GRU
# --------------------------------------------------------------------------------------------


def _rnn_blocks(model: Any, sd: Mapping[str, Any], gates: tuple[str, ...], what: str):
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
    split = lambda a: dict(zip(gates, _blocks(a, n)))  # noqa: E731
    return split(w_ih), split(w_hh), split(b_ih), split(b_hh)


def load_torch_lstm(model: SeqLSTM, state_dict: Mapping[str, Any], *, embedding: Any = None) -> None:
    """Load an ``nn.LSTM(input, hidden)`` state dict into a :class:`~cortex.models.SeqLSTM`:
    row blocks ``i, f, g, o`` of ``weight_ih_l0`` / ``weight_hh_l0`` -> ``W_*`` / ``U_*``;
    ``b_* = bias_ih + bias_hh``."""
    what = "load_torch_lstm"
    _expect(model, SeqLSTM, what)
    w, u, bi, bh = _rnn_blocks(model, state_dict, ("i", "f", "g", "o"), what)
    values = {}
    for k in ("i", "f", "g", "o"):
        values[f"W_{k}"], values[f"U_{k}"], values[f"b_{k}"] = w[k], u[k], bi[k] + bh[k]
    set_params(model, _embedding(model, values, embedding, {}, what))


def load_torch_gru(model: SeqGRU, state_dict: Mapping[str, Any], *, embedding: Any = None) -> None:
    """Load an ``nn.GRU(input, hidden)`` state dict into a :class:`~cortex.models.SeqGRU`: row
    blocks ``r, z, n``; ``b_r, b_z = bias_ih + bias_hh``; ``b_in`` and ``b_hn`` stay apart (the
    reset gate multiplies ``U_n h + b_hn``)."""
    what = "load_torch_gru"
    _expect(model, SeqGRU, what)
    w, u, bi, bh = _rnn_blocks(model, state_dict, ("r", "z", "n"), what)
    values = {}
    for k in ("r", "z", "n"):
        values[f"W_{k}"], values[f"U_{k}"] = w[k], u[k]
    values["b_r"], values["b_z"] = bi["r"] + bh["r"], bi["z"] + bh["z"]
    values["b_in"], values["b_hn"] = bi["n"], bh["n"]
    set_params(model, _embedding(model, values, embedding, {}, what))


# --------------------------------------------------------------------------------------------
# Tree-LSTMs
# --------------------------------------------------------------------------------------------


def load_torch_childsum(model: ChildSumTreeLSTM, state_dict: Mapping[str, Any], *,
                        prefix: str | None = None, embedding: Any = None) -> None:
    """Load the common PyTorch child-sum Tree-LSTM module (``ioux, iouh: Linear(., 3H)`` split
    ``i, o, u``; ``fx, fh: Linear(., H)``; an embedding) into a
    :class:`~cortex.models.ChildSumTreeLSTM`: ``W_{i,o,u}`` / ``U_{i,o,u}`` = row blocks of
    ``ioux.weight`` / ``iouh.weight``, ``b_{i,o,u}`` = blocks of ``ioux.bias + iouh.bias``,
    ``W_f, U_f = fx.weight, fh.weight``, ``b_f = fx.bias + fh.bias``. (That module feeds a leaf
    zero child states, so its leaf equals ours: ``iouh(0) = iouh.bias``, ``f * 0`` vanishes.)"""
    what = "load_torch_childsum"
    _expect(model, ChildSumTreeLSTM, what)
    sd = _module(state_dict, "ioux.weight", prefix, what)
    h, d = model.hidden, model.param_specs["W_i"].shape[1]
    get = lambda k, shape: _get(sd, k, what, shape)  # noqa: E731
    w_iou, u_iou = _blocks(get("ioux.weight", (3 * h, d)), 3), _blocks(get("iouh.weight", (3 * h, h)), 3)
    b_iou = _blocks(_bias(sd, "ioux.bias", what, 3 * h) + _bias(sd, "iouh.bias", what, 3 * h), 3)
    values = {}
    for j, k in enumerate(("i", "o", "u")):
        values[f"W_{k}"], values[f"U_{k}"], values[f"b_{k}"] = w_iou[j], u_iou[j], b_iou[j]
    values["W_f"], values["U_f"] = get("fx.weight", (h, d)), get("fh.weight", (h, h))
    values["b_f"] = _bias(sd, "fx.bias", what, h) + _bias(sd, "fh.bias", what, h)
    set_params(model, _embedding(model, values, embedding, state_dict, what))


#: Tai et al.'s binary composer: our gate (``U_{gate}_l``, ``b_{gate}``) -> its two
#: ``Linear(H, H)`` (left child, right child).
COMPOSER = {"i": ("ilh", "irh"), "f0": ("lflh", "lfrh"), "f1": ("rflh", "rfrh"),
            "u": ("ulh", "urh"), "o": ("olh", "orh")}


def load_torch_binary_treelstm(model: TreeLSTM, state_dict: Mapping[str, Any], *,
                               prefix: str | None = None, embedding: Any = None) -> None:
    """Load the binary Tree-LSTM of Tai et al.'s released code, as its PyTorch ports name it,
    into ``TreeLSTM(arity=2, leaf="linear", forget_bias="per_child")``.

    Leaf module: ``leaf_module.cx``, ``leaf_module.ox`` (``Linear(in, H)``): ``c = cx(x)``,
    ``h = sigmoid(ox(x)) * tanh(c)``. Composer, one ``Linear(H, H)`` per gate and child (left
    ``l``, right ``r``): ``composer.ilh, irh`` (input gate), ``lflh, lfrh`` (left forget gate),
    ``rflh, rfrh`` (right forget gate), ``ulh, urh`` (update), ``olh, orh`` (output gate).
    ``W_c_leaf, b_c_leaf = cx``; ``W_o_leaf, b_o_leaf = ox``; ``U_i_0 = ilh.weight``,
    ``U_i_1 = irh.weight``, ``b_i = ilh.bias + irh.bias``, and likewise ``U_f0_*``/``b_f0`` from
    ``lflh, lfrh``, ``U_f1_*``/``b_f1`` from ``rflh, rfrh``, ``U_u_*``/``b_u``, ``U_o_*``/``b_o``.
    Gates built with ``bias=False`` have zero biases. The variant without an output gate
    (``gate_output=False``: no ``ox``, ``olh``, ``orh``) is refused."""
    what = "load_torch_binary_treelstm"
    _expect(model, TreeLSTM, what, arity=2, leaf="linear", forget_bias="per_child")
    sd = _module(state_dict, "leaf_module.cx.weight", prefix, what)
    h, d = model.hidden, model.param_specs["W_c_leaf"].shape[1]
    if "leaf_module.ox.weight" not in sd or "composer.olh.weight" not in sd:
        raise ParamError(f"{what}: no output gate (leaf_module.ox, composer.olh): a module built "
                         "with gate_output=False (h = tanh(c)) is not a Cortex TreeLSTM")
    used: set[str] = set()

    def linear(name: str, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        used.update((f"{name}.weight", f"{name}.bias"))
        return _get(sd, f"{name}.weight", what, shape), _bias(sd, f"{name}.bias", what, shape[0])

    values: dict[str, np.ndarray] = {}
    for gate, module in (("c", "cx"), ("o", "ox")):
        values[f"W_{gate}_leaf"], values[f"b_{gate}_leaf"] = linear(f"leaf_module.{module}", (h, d))
    for gate, (left, right) in COMPOSER.items():
        (w_l, b_l), (w_r, b_r) = linear(f"composer.{left}", (h, h)), linear(f"composer.{right}", (h, h))
        values[f"U_{gate}_0"], values[f"U_{gate}_1"], values[f"b_{gate}"] = w_l, w_r, b_l + b_r
    _no_other_keys(sd, used, ("leaf_module.", "composer."), what,
                   "a variant of the layout with more weights (e.g. input at internal nodes), "
                   "which this TreeLSTM does not have")
    set_params(model, _embedding(model, values, embedding, state_dict, what))


def load_dgl_treelstm(model: TreeLSTM | ChildSumTreeLSTM, state_dict: Mapping[str, Any], *,
                      prefix: str | None = None, embedding: Any = None) -> None:
    """Load DGL's Tree-LSTM example (``examples/pytorch/tree_lstm``): its ``TreeLSTM`` module's
    state dict (``embedding``, ``cell.*``, the classifier ``linear``, which is not part of
    the recursion and is ignored) or the cell's alone.

    ``TreeLSTMCell`` (the N-ary cell, ``cell_type="nary"``) -> ``TreeLSTM(arity=N,
    forget_bias="per_child")``: with ``H`` the hidden size and the children's states
    concatenated ``[h_0; ...; h_{N-1}]`` in mailbox order, ``W_i, W_o, W_u`` = row blocks of
    ``W_iou.weight [3H, X]``; ``U_i_l, U_o_l, U_u_l`` = row blocks of ``U_iou.weight [3H, N*H]``,
    column block ``l``; ``b_i, b_o, b_u`` = blocks of ``b_iou [1, 3H]`` (leaves and internal
    nodes share it, as in ours); ``U_f{k}_l`` = block ``(k, l)`` of ``U_f.weight [N*H, N*H]``
    and ``b_f{k}`` = block ``k`` of ``U_f.bias``.

    ``ChildSumTreeLSTMCell`` -> ``ChildSumTreeLSTM``: ``W_*``, ``U_*``, ``b_*`` for ``i, o, u``
    as above from ``U_iou.weight [3H, H]``; ``U_f, b_f = U_f.weight, U_f.bias``; ``W_f = 0``
    (its forget gate reads no input). DGL multiplies ``W_iou x`` by a mask that is 0 where a
    node has no word; Cortex reads every node's token, so the two agree where every node has a
    word (dependency trees)."""
    what = "load_dgl_treelstm"
    sd = _module(state_dict, "W_iou.weight", prefix, what)
    child_sum = isinstance(model, ChildSumTreeLSTM)
    if not child_sum:
        _expect(model, TreeLSTM, what, also=" or a ChildSumTreeLSTM", forget_bias="per_child",
                leaf="gated")
    h, n = model.hidden, 1 if child_sum else model.arity
    u_iou = _get(sd, "U_iou.weight", what)
    if u_iou.shape[1:] != (n * h,):
        cell = ("ChildSumTreeLSTMCell, for a ChildSumTreeLSTM" if u_iou.shape[1:] == (h,) else
                f"TreeLSTMCell of {u_iou.shape[1] // h} children, for a TreeLSTM(arity="
                f"{u_iou.shape[1] // h}, forget_bias='per_child')")
        raise ParamError(f"{what}: 'U_iou.weight' has shape {u_iou.shape}: DGL's {cell}; "
                         f"the model is a {type(model).__name__} with hidden={h}")
    d = model.param_specs["W_i"].shape[1]
    w_iou = _blocks(_get(sd, "W_iou.weight", what, (3 * h, d)), 3)
    b_iou = _blocks(_get(sd, "b_iou", what, (1, 3 * h)).reshape(-1), 3)
    u_f = _get(sd, "U_f.weight", what, (n * h, n * h))
    b_f = _bias(sd, "U_f.bias", what, n * h)
    values: dict[str, np.ndarray] = {}
    for j, gate in enumerate(("i", "o", "u")):
        values[f"W_{gate}"], values[f"b_{gate}"] = w_iou[j], b_iou[j]
        rows = u_iou[j * h:(j + 1) * h]
        if child_sum:
            values[f"U_{gate}"] = rows
        else:
            for l, block in enumerate(_blocks(rows, n, axis=1)):
                values[f"U_{gate}_{l}"] = block
    if child_sum:
        values["U_f"], values["b_f"], values["W_f"] = u_f, b_f, np.zeros((h, d))
    else:
        for k in range(n):
            values[f"b_f{k}"] = b_f[k * h:(k + 1) * h]
            for l in range(n):
                values[f"U_f{k}_{l}"] = u_f[k * h:(k + 1) * h, l * h:(l + 1) * h]
    _no_other_keys(sd, {"W_iou.weight", "U_iou.weight", "b_iou", "U_f.weight", "U_f.bias"},
                   ("W_iou.", "U_iou.", "b_iou", "U_f.", "W_f.", "b_f"), what,
                   "a variant of DGL's cell with more weights (e.g. an input term in the forget "
                   "gate), which this importer does not map")
    set_params(model, _embedding(model, values, embedding, state_dict, what))


# --------------------------------------------------------------------------------------------
# TreeGRU
# --------------------------------------------------------------------------------------------


def load_torch_treegru(model: TreeGRU, state_dict: Mapping[str, Any], *,
                       prefix: str | None = None, embedding: Any = None) -> None:
    """Load an N-ary tree GRU written as in ``docs/models.md`` into a
    :class:`~cortex.models.TreeGRU`: ``W_e = Linear(X, H)`` (leaf: ``h = tanh(W_e x)``),
    ``U_rz = Linear(N*H, 2H)`` (``[r; z] = sigmoid(U_rz [h_0; ...; h_{N-1}])``) and
    ``U_n = Linear(N*H, H)`` (``n = tanh(U_n [r*h_0; ...; r*h_{N-1}])``), then
    ``h = (1 - z) * n + z * mean_k h_k``. ``W_e, b_e = W_e``; ``U_r_k, U_z_k`` = column block
    ``k`` of the row blocks of ``U_rz.weight``, ``b_r, b_z`` = blocks of ``U_rz.bias``;
    ``U_n_k`` = column block ``k`` of ``U_n.weight``, ``b_n = U_n.bias``."""
    what = "load_torch_treegru"
    _expect(model, TreeGRU, what)
    sd = _module(state_dict, "U_rz.weight", prefix, what)
    h, n = model.hidden, model.arity
    d = model.param_specs["W_e"].shape[1]
    u_rz = _blocks(_get(sd, "U_rz.weight", what, (2 * h, n * h)), 2)
    b_rz = _blocks(_bias(sd, "U_rz.bias", what, 2 * h), 2)
    u_n = _get(sd, "U_n.weight", what, (h, n * h))
    values = {"W_e": _get(sd, "W_e.weight", what, (h, d)), "b_e": _bias(sd, "W_e.bias", what, h),
              "b_r": b_rz[0], "b_z": b_rz[1], "b_n": _bias(sd, "U_n.bias", what, h)}
    for k in range(n):
        values[f"U_r_{k}"] = u_rz[0][:, k * h:(k + 1) * h]
        values[f"U_z_{k}"] = u_rz[1][:, k * h:(k + 1) * h]
        values[f"U_n_{k}"] = u_n[:, k * h:(k + 1) * h]
    _no_other_keys(sd, {f"{m}.{p}" for m in ("W_e", "U_rz", "U_n") for p in ("weight", "bias")},
                   ("W_e.", "U_rz.", "U_n."), what, "not the TreeGRU layout of docs/models.md")
    set_params(model, _embedding(model, values, embedding, state_dict, what))
