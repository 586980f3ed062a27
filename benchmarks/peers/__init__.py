"""Peer implementations the Cortex benchmarks compare against, measured in the same process.

Pipeline position: outside the pipeline; used only by ``benchmarks/bench_treelstm.py``.

Every peer implements the SAME equations as a zoo model (``cortex/models``) with the SAME
weights (read from the model's ``params``), and is checked against the float64 reference
evaluator (``cortex.core.frontend.reference.evaluate``) before it is timed. A peer module exposes
builder functions ``build(work: Workload) -> Callable[[], dict[str, np.ndarray]]``: the
returned closure runs one forward pass over the whole batch and returns the root states
(``{"h": [B, H], ...}``) as NumPy arrays (the device-to-host copy is part of the timed call).

Structure preprocessing a peer needs (level index tensors) is done by the builder, outside
the timed call: this favours the peers, whereas the Cortex executable's public call includes
its linearizer.

Modules: ``plan`` (weights and level plans shared by the peers), ``torch_peers`` (PyTorch eager
naive and level-batched, on CPU or CUDA, and torch.compile), ``numpy_peer``, ``dynet_peer``,
``torch_other`` (TreeFC, TreeGRU, MV-RNN, DAG-RNN, SeqLSTM peers).
"""
