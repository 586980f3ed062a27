"""The model zoo: the Cortex paper's recursive models and the sequence baselines.

Pipeline position: user-facing models written with ``cortex.core.frontend.model``; each traces to a
``RecursiveGraph`` with ``.trace()``. Every class documents its equations in its docstring;
``docs/models.md`` lists them with their parameter names. ``cortex.models.importers`` loads
PyTorch and DGL weights into them (its ``load_*`` functions are re-exported here).
"""

from cortex.models.dagrnn import DAGRNN
from cortex.models.importers import (load_dgl_treelstm, load_torch_binary_treelstm,
                                     load_torch_childsum, load_torch_gru, load_torch_lstm,
                                     load_torch_treegru)
from cortex.models.mvrnn import MVRNN
from cortex.models.sequence import SeqGRU, SeqLSTM
from cortex.models.tree_fc import TreeFC
from cortex.models.tree_gru import TreeGRU
from cortex.models.tree_lstm import ChildSumTreeLSTM, TreeLSTM
from cortex.models.tree_rnn import TreeRNN

__all__ = [
    "TreeFC",
    "TreeRNN",
    "TreeGRU",
    "TreeLSTM",
    "ChildSumTreeLSTM",
    "MVRNN",
    "DAGRNN",
    "SeqLSTM",
    "SeqGRU",
    "load_torch_lstm",
    "load_torch_gru",
    "load_torch_childsum",
    "load_torch_binary_treelstm",
    "load_dgl_treelstm",
    "load_torch_treegru",
]
