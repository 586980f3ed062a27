"""The LoopProgram IR (the paper's ILIR) and the tools that read it.

Pipeline position: the middle of the pipeline. The lowering (:mod:`cortex.core.lowering`) turns
a RecursiveGraph into a :class:`Program`, the schedule rewrites it, backends render it.

* :mod:`~cortex.core.loopir.nodes` — the immutable IR itself, re-exported here, so
  ``from cortex.core import loopir as ir`` then ``ir.For(...)``;
* :mod:`~cortex.core.loopir.sizes` — the linearizer's arrays as declarations, shapes as
  functions of the sizes (re-exported here too);
* :mod:`~cortex.core.loopir.printer` — readable pseudo-code (``print(program)``);
* :mod:`~cortex.core.loopir.verify` — names, types, scopes, barriers and index bounds;
* :mod:`~cortex.core.loopir.interpret` — a vectorized NumPy interpreter, the executable oracle
  of lowering and scheduling (and the ``numpy`` target).
"""

from cortex.core.loopir.nodes import (  # noqa: F401
    BARRIER_SCOPES, BIN_OPS, BOOL, CLAIMS_PER_THREAD, CMP_OPS, DTYPES, FLOAT_DTYPES, INT, INTRINSICS, LAUNCH_KEYS,
    LOOP_ANNOTATIONS, LOOP_KINDS, READ_ONLY_ROLES, REDUCE_OPS, ROLES, SCOPES, STORAGE_FORMATS, Alloc, Barrier, BinOp,
    Buffer, Call, Cast, Cmp, Const, Expr, ExprLike, For, HostFor, HostStep, If, Kernel, Launch, Let,
    Load, LoopIRError, Node, Not, Prefetch, Program, Reduce, Select, Seq, Size, Stmt, Store, Var,
    as_expr, call, children, const_int, eq, fconst, field_names, infer_dtype, land, maximum, minimum, ne, rename_buffer, seq,
    simplify, substitute, transform, walk,
)
from cortex.core.loopir.sizes import linearizer_buffers, linearizer_sizes, shape_function, size_function  # noqa: F401
