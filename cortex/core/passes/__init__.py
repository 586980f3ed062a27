"""Graph passes over the RecursiveGraph: pure functions ``RecursiveGraph -> RecursiveGraph``.

Pipeline position: between tracing and the recursion lowering; the order lives in
``cortex.core.passes.pipeline``.
"""

from cortex.core.passes.cse import cse
from cortex.core.passes.dce import dce
from cortex.core.passes.distribute import distribute_linear
from cortex.core.passes.fold_constants import fold_constants
from cortex.core.passes.fusion_groups import fusion_groups
from cortex.core.passes.hoist import hoist_invariant
from cortex.core.passes.pipeline import ALL_PASSES, DEFAULT_PASSES, run_passes, with_table_limit
from cortex.core.passes.preterminal import preterminal
from cortex.core.passes.stack_gates import stack_gates

__all__ = [
    "cse",
    "dce",
    "distribute_linear",
    "fold_constants",
    "fusion_groups",
    "hoist_invariant",
    "preterminal",
    "stack_gates",
    "run_passes",
    "with_table_limit",
    "ALL_PASSES",
    "DEFAULT_PASSES",
]
