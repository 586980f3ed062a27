"""Data for recursive models: readers, vocabularies, input forms and bundled examples.

Pipeline position: what users feed a compiled model. Everything here produces structures that
``cortex.core.linearize.linearize`` (re-exported as :func:`linearize`) accepts; see
``docs/data.md`` for the forms and the rules for raw Python objects.
"""

from __future__ import annotations

from ..core.linearize import (ArityError, ChildTable, CycleError, EdgeList, EmptyBatchError,
                              FeatureError, Grid, IndexOverflowError, MemoryLimitError,
                              MixedInputError, Node, NodeIndexError, ParentArray, ParseError,
                              RootError, Sequence, SExpr, StructureError, TokenError, Tree,
                              UnsupportedInputError, cache_info, clear_cache, limits, linearize,
                              set_cache, set_limits)
from .ast_trees import AST_NODE_TYPES, AST_VOCAB_SIZE, ast_tree
from .examples import example_snippets, example_texts, example_vocab, examples
from .ptb import read_ptb, sexpr_words
from .vocab import UNK, Vocabulary

__all__ = [
    "linearize", "Vocabulary", "UNK", "read_ptb", "sexpr_words", "ast_tree", "AST_NODE_TYPES",
    "AST_VOCAB_SIZE", "examples", "example_vocab", "example_texts", "example_snippets",
    "Node", "Tree", "SExpr", "ParentArray", "ChildTable", "EdgeList", "Sequence", "Grid",
    "StructureError", "EmptyBatchError", "ParseError", "CycleError", "RootError",
    "NodeIndexError", "ArityError", "TokenError", "FeatureError", "MixedInputError",
    "IndexOverflowError", "MemoryLimitError", "UnsupportedInputError", "set_cache",
    "clear_cache", "cache_info", "set_limits", "limits",
]
