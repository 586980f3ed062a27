"""The fixed table of Python ``ast`` node-type ids used as tokens of AST trees.

Pipeline position: ``nested`` (raw ``ast.AST`` inputs) and ``cortex.data.ast_tree`` give every
AST node the id of its class name in :data:`AST_NODE_TYPES`. The table is written out here, not
read from the running interpreter, so ids are the same on every Python version: id 0 is
:data:`AST_UNKNOWN` (a class name not in the table, e.g. from a future Python), then the names
below in order (ids 1..). Append new names at the end only; never reorder.
"""

from __future__ import annotations

AST_UNKNOWN = 0

AST_NODE_TYPES: tuple[str, ...] = (
    # modules
    "Module", "Interactive", "Expression", "FunctionType",
    # statements
    "FunctionDef", "AsyncFunctionDef", "ClassDef", "Return", "Delete", "Assign", "AugAssign",
    "AnnAssign", "For", "AsyncFor", "While", "If", "With", "AsyncWith", "Match", "Raise",
    "Try", "TryStar", "Assert", "Import", "ImportFrom", "Global", "Nonlocal", "Expr", "Pass",
    "Break", "Continue",
    # expressions
    "BoolOp", "NamedExpr", "BinOp", "UnaryOp", "Lambda", "IfExp", "Dict", "Set", "ListComp",
    "SetComp", "DictComp", "GeneratorExp", "Await", "Yield", "YieldFrom", "Compare", "Call",
    "FormattedValue", "JoinedStr", "Constant", "Attribute", "Subscript", "Starred", "Name",
    "List", "Tuple", "Slice",
    # expression contexts
    "Load", "Store", "Del",
    # operators
    "And", "Or", "Add", "Sub", "Mult", "MatMult", "Div", "Mod", "Pow", "LShift", "RShift",
    "BitOr", "BitXor", "BitAnd", "FloorDiv", "Invert", "Not", "UAdd", "USub", "Eq", "NotEq",
    "Lt", "LtE", "Gt", "GtE", "Is", "IsNot", "In", "NotIn",
    # other nodes
    "comprehension", "ExceptHandler", "arguments", "arg", "keyword", "alias", "withitem",
    "match_case", "MatchValue", "MatchSingleton", "MatchSequence", "MatchMapping", "MatchClass",
    "MatchStar", "MatchAs", "MatchOr", "TypeIgnore",
    # Python 3.12+ / 3.14+
    "TypeAlias", "TypeVar", "ParamSpec", "TypeVarTuple", "Interpolation", "TemplateStr",
)

AST_TYPE_IDS: dict[str, int] = {name: i + 1 for i, name in enumerate(AST_NODE_TYPES)}

#: Number of distinct ids (use as the vocabulary size of an AST model).
AST_VOCAB_SIZE = len(AST_NODE_TYPES) + 1


def ast_type_id(node: object) -> int:
    """The id of an ``ast`` node's class name, or :data:`AST_UNKNOWN`."""
    return AST_TYPE_IDS.get(type(node).__name__, AST_UNKNOWN)
