"""Inputs, FLOP counts and checks of the benchmarks, for the scripts and tests that import them
from here: they live in :mod:`cortex.bench.workloads` (what ``cortex bench`` runs)."""

from cortex.bench.workloads import (batch_shape, flops, make_trees, max_error,  # noqa: F401
                                    parse_like_tree, tree_height)
