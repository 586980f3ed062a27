"""The model zoo: the Cortex paper's recursive models and the sequence baselines.

Pipeline position: user-facing models written with ``cortex.core.frontend.model``; each traces to a
``RecursiveGraph`` with ``.trace()``. Every class documents its equations in its docstring;
``docs/models.md`` lists them with their parameter names.
"""

from cortex.models.dagrnn import DAGRNN
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
]
