"""The peers ``cortex bench`` compares Cortex against: other implementations of the same models.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. A worker process
(:mod:`cortex.bench.worker`) builds one peer for one group of points and times it; the runner
never imports a peer's library itself.

Every peer implements the SAME equations as a zoo model (``cortex/models``) with the SAME
weights (read from the model's ``params``), and its root states are checked against the float64
reference evaluator before it is timed. A builder takes ``(model, batch, raw)`` -- the zoo
model, the point's ``LinearizedBatch`` and its inputs in raw form (nested tuples, token arrays)
-- and returns a closure that runs one forward pass over the whole batch and returns the root
states (``{"h": [B, H], ...}``) as NumPy arrays (a device-to-host copy is part of the timed
call), or a ``(closure, compile seconds, compile was cold)`` triple.

Structure preprocessing a peer needs (level index tensors) is done by the builder, outside
the timed call: this favours the peers, whereas the Cortex executable's public call includes
its linearizer (the JSON has both ratios, see ``cortex.bench.summary``).

Modules: ``plan`` (weights and level plans shared by the peers), ``numpy_peer`` (always
available), ``torch_peers`` (binary TreeLSTM: PyTorch eager naive and level-batched, on CPU or
CUDA, and torch.compile), ``torch_other`` (the other models), ``dynet_peer``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class PeerSpec:
    """One peer: the models it implements, what it needs, how to build it."""

    name: str
    models: tuple[str, ...]
    needs: str | None  # the module it imports ("torch", "dynet"), None: NumPy only
    build: Callable[[Any, Any, Any], Any]  # (model, batch, raw) -> run | (run, compile_s, cold)
    what: str
    device: str = "cpu"
    # in the default selection: True, False (only when named), or "cuda" (when the cuda
    # target is benchmarked: the GPU peer of the GPU target)
    default: bool | str = True

    def missing(self) -> str | None:
        """Why this peer cannot run here (its library is not installed), else None."""
        if self.needs is None or importlib.util.find_spec(self.needs) is not None:
            return None
        fix = {"torch": "pip install torch", "dynet": "pip install dyNET38"}.get(self.needs, "")
        return f"{self.needs} is not installed" + (f" ({fix})" if fix else "")


def _numpy(fn: str) -> Callable[[Any, Any, Any], Any]:
    def build(model: Any, batch: Any, raw: Any) -> Any:
        from cortex.bench.peers import numpy_peer

        return getattr(numpy_peer, fn)(model, batch)
    return build


def _torch_other(fn: str, on_raw: bool = False) -> Callable[[Any, Any, Any], Any]:
    def build(model: Any, batch: Any, raw: Any) -> Any:
        from cortex.bench.peers import torch_other

        return getattr(torch_other, fn)(model, raw if on_raw else batch)
    return build


def _torch_treelstm(kind: str) -> Callable[[Any, Any, Any], Any]:
    def build(model: Any, batch: Any, raw: Any) -> Any:
        from cortex.bench.peers import torch_peers as tp

        if kind == "naive":
            return tp.build_naive(model, raw)
        if kind == "compiled":
            return tp.build_compiled(model, batch)
        return tp.build_levels(model, batch, "cuda" if kind == "cuda" else "cpu")
    return build


def _dynet(model: Any, batch: Any, raw: Any) -> Any:
    from cortex.bench.peers import dynet_peer

    return dynet_peer.build_autobatch(model, raw)


PEERS: tuple[PeerSpec, ...] = (
    PeerSpec("numpy_levels", ("TreeLSTM",), None, _numpy("build_levels"),
             "NumPy level-batched, float32, BLAS matmul"),
    PeerSpec("numpy_levels", ("TreeGRU",), None, _numpy("build_treegru_levels"),
             "NumPy level-batched, float32, BLAS matmul"),
    PeerSpec("numpy_levels", ("ChildSumTreeLSTM",), None, _numpy("build_childsum_levels"),
             "NumPy level-batched over the CSR child lists (reduceat), float32"),
    PeerSpec("torch_naive", ("TreeLSTM",), "torch", _torch_treelstm("naive"),
             "PyTorch eager, Python recursion, one node at a time (addmv)"),
    PeerSpec("torch_levels", ("TreeLSTM",), "torch", _torch_treelstm("levels"),
             "PyTorch eager, all nodes of a level at once (index_select, one addmm)"),
    PeerSpec("torch_levels", ("TreeGRU",), "torch", _torch_other("build_treegru_levels"),
             "PyTorch eager level-batched"),
    PeerSpec("torch_levels", ("ChildSumTreeLSTM",), "torch", _torch_other("build_childsum_levels"),
             "PyTorch eager level-batched (index_add over the CSR child lists)"),
    PeerSpec("torch_levels", ("TreeFC",), "torch", _torch_other("build_treefc_levels"),
             "PyTorch eager level-batched"),
    PeerSpec("torch_levels", ("MVRNN",), "torch", _torch_other("build_mvrnn_levels"),
             "PyTorch eager level-batched (bmm)"),
    PeerSpec("torch_levels", ("DAGRNN",), "torch", _torch_other("build_dagrnn_levels"),
             "PyTorch eager level-batched (index_add over the CSR child lists)"),
    PeerSpec("torch_nn_lstm", ("SeqLSTM",), "torch", _torch_other("build_seqlstm_nn", on_raw=True),
             "torch.nn.LSTM with the model's weights"),
    PeerSpec("torch_compile_levels", ("TreeLSTM",), "torch", _torch_treelstm("compiled"),
             "torch_levels with the cell in torch.compile(dynamic=True); compile_s is its first call",
             default=False),
    PeerSpec("torch_cuda_levels", ("TreeLSTM",), "torch", _torch_treelstm("cuda"),
             "torch_levels on the GPU", device="cuda", default="cuda"),
    PeerSpec("dynet_autobatch", ("TreeLSTM",), "dynet", _dynet,
             "DyNet with autobatch=1: builds the graph per call and autobatches it"),
)

FAMILIES = ("numpy", "torch", "dynet")  # --peers may name a family: its default peers


def peer_names() -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.name for p in PEERS))


def peer_for(name: str, model: str) -> PeerSpec | None:
    """The peer called ``name`` that implements ``model``, if any."""
    return next((p for p in PEERS if p.name == name and model in p.models), None)


def select(model: str, wanted: tuple[str, ...] | None, targets: tuple[str, ...]) -> list[PeerSpec]:
    """The peers of ``model`` to run: ``wanted`` names peers or families (None: every default
    peer; installed or not -- a missing library is recorded as a skip with its reason)."""
    out = []
    for p in PEERS:
        if model not in p.models:
            continue
        family = p.needs or "numpy"
        if wanted is None:
            chosen = p.default is True or (p.default == "cuda" and "cuda" in targets)
        else:
            chosen = p.name in wanted or (family in wanted and p.default is True)
        if chosen:
            out.append(p)
    return out
