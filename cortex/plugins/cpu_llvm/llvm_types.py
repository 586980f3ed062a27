"""LLVM types, constants and small value helpers shared by the ``llvm`` code generator's modules.

Pipeline position: the bottom of the ``llvm`` renderer (:mod:`cortex.plugins.cpu_llvm.codegen`):
element types of the LoopProgram dtypes, the error type, the short-form vector constants
(``splat (float c)``), and the ``llvm.loop`` metadata node the generator patches into the text.
"""

from __future__ import annotations

from llvmlite import ir as ll

from cortex.core import loopir as ir

I1 = ll.IntType(1)
I8 = ll.IntType(8)
I16 = ll.IntType(16)
I32 = ll.IntType(32)
I64 = ll.IntType(64)
F32 = ll.FloatType()
F64 = ll.DoubleType()
PTR = ll.PointerType()
VOID = ll.VoidType()
# "bfloat16": a storage format (``Buffer.stored``), loaded as i16 and widened to float
LTYPE = {"int32": I32, "bool": I1, "float32": F32, "float64": F64, "bfloat16": I16}
SIZEOF = {"int32": 4, "bool": 1, "float32": 4, "float64": 8, "bfloat16": 2}
PARTITIONED_KINDS = ("parallel", "gpu_group")
FAST_REDUCE = ("reassoc", "contract")


class CodegenError(ir.LoopIRError):
    """The program uses a construct the ``llvm`` code generator cannot express."""



class _SplatConst(ll.Constant):
    """A vector constant with every lane equal (or undef), printed in LLVM's short form
    ``splat (float 1.0)`` / ``undef``: llvmlite writes every lane out, which for 16-lane
    vectors made most of the IR text and of its formatting and parsing time."""

    def __init__(self, ty: ll.VectorType, elem: ll.Constant | None) -> None:  # noqa: D107
        self.type = ty
        self.constant = elem

    def _get_reference(self) -> str:
        if self.constant is None:
            return "undef"
        return f"splat ({self.constant.type} {self.constant.get_reference()})"


def _splat_const(ty: ll.VectorType, elem: ll.Constant | None) -> ll.Constant:
    """``ty`` with every lane ``elem`` (None: undef)."""
    return _SplatConst(ty, elem)


_ZERO_MASKS: dict[int, ll.Constant] = {}


def _zero_mask(width: int) -> ll.Constant:
    """The all-zero shuffle mask (a broadcast), one object per width (its text is cached)."""
    if width not in _ZERO_MASKS:
        _ZERO_MASKS[width] = ll.Constant(ll.VectorType(I32, width), [0] * width)
    return _ZERO_MASKS[width]


def _is_vec(v: ll.Value) -> bool:
    return isinstance(v.type, ll.VectorType)


def _width(v: ll.Value) -> int:
    return v.type.count if _is_vec(v) else 0


SIZEOF_LL = {"i32": 4, "i1": 1, "float": 4, "double": 8, "i16": 2}



def _vkey(v: ll.Value):
    if isinstance(v, ll.Constant) and isinstance(v.constant, int):
        return (str(v.type), v.constant)
    return id(v)



class _LoopMD:
    """A distinct, self-referencing ``llvm.loop`` node. llvmlite's IR builder cannot express a
    self reference, so a named placeholder is patched in the module text."""

    def __init__(self, fn: str, ident: int, props: list) -> None:
        self.tag = f"cxloop_{fn}_{ident}"
        self.props = props
        self.md = None

    def placeholder(self, m: ll.Module):
        self.md = m.add_metadata([ll.MetaDataString(m, self.tag)] + self.props)
        return self.md
