"""Private arrays kept in registers: the ``llvm`` generator's translation of an accumulator array.

Pipeline position: inside the ``llvm`` renderer, a part of the kernel emitter
(:class:`~cortex.plugins.cpu_llvm.kernel._KernelGen` inherits it). A schedule transform (the node
jam, ``cortex.core.lowering.jam_fuse``) writes a group's accumulators as a private array whose every
access names a constant *slot*: ``acc[c]``, or ``acc[c + jv]`` inside a ``vectorized`` loop over
``jv`` of width ``W`` (the ``W`` lanes from ``c``). Such an array is *promoted*: no memory, one
SSA value per slot (a ``<W x T>`` vector), and a serial loop that stores to slots gets a phi per
slot at its header and after its exit -- what SROA and mem2reg would make of an ``alloca``, done
while the IR is built, so the module is as small as a hand-written register-blocked loop (a
third of the text of the memory form for the TreeLSTM, and no time spent in SROA on it).

An array is promoted when every access is such a slot access, the slots of different widths do
not overlap, and no store to it sits under an ``If`` (slots would need merging at the join);
otherwise it stays an ``alloca`` (an array type, which SROA can split).
"""

from __future__ import annotations

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.llvm_types import LTYPE, CodegenError, _is_vec

Slot = tuple[int, int]  # (first element, lanes)


def _slot(e: ir.Expr, lanes: dict[str, int]) -> Slot | None:
    """``c`` -> (c, 1); ``jv``, ``c + jv`` or ``jv + c`` with ``jv`` a vectorized loop's var -> (c, W)."""
    c = ir.const_int(e)
    if c is not None:
        return c, 1
    if isinstance(e, ir.Var) and e.name in lanes:
        return 0, lanes[e.name]
    if isinstance(e, ir.BinOp) and e.op == "+":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            k = ir.const_int(x)
            if k is not None and isinstance(y, ir.Var) and y.name in lanes:
                return k, lanes[y.name]
    return None


def slot_accesses(node: ir.Node, name: str) -> tuple[set[Slot], dict[int, set[Slot]], bool] | None:
    """(slots accessed, the slots stored inside each loop by ``id``, a store under an If) for
    every access of array ``name`` in ``node``; None when an access is not a slot access."""
    used: set[Slot] = set()
    per_loop: dict[int, set[Slot]] = {}
    under_if = False
    ok = True

    def visit(n: ir.Node, lanes: dict[str, int], loops: tuple[int, ...], in_if: bool) -> None:
        nonlocal under_if, ok
        if not ok:
            return
        if isinstance(n, (ir.Load, ir.Store)) and n.buffer == name:
            s = _slot(n.index[0], lanes) if len(n.index) == 1 else None
            if s is None:
                ok = False
                return
            used.add(s)
            if isinstance(n, ir.Store):
                under_if = under_if or in_if
                for loop in loops:
                    per_loop.setdefault(loop, set()).add(s)
        if isinstance(n, ir.For):
            inner = lanes
            if n.kind == "vectorized":
                a, b = ir.const_int(n.start), ir.const_int(n.stop)
                inner = dict(lanes)
                if a == 0 and b is not None:
                    inner[n.var] = b
                else:
                    inner.pop(n.var, None)
            else:
                loops = loops + (id(n),)
            for k in ir.children(n):
                visit(k, inner, loops, in_if)
            return
        sub_if = in_if or isinstance(n, ir.If)
        for k in ir.children(n):
            visit(k, lanes, loops, sub_if)

    visit(node, {}, (), False)
    return (used, per_loop, under_if) if ok else None


class _RegisterArrays:
    """Register-promoted private arrays (a mixin of ``_KernelGen``): ``self.regs[name][slot]``."""

    def promote(self, s: ir.Alloc) -> bool:
        """Keep ``s`` in registers (see the module doc)? Registers it when so."""
        if s.scope != "private" or len(s.shape) != 1:
            return False
        found = slot_accesses(s.body, s.name)
        if found is None or found[2]:
            return False
        slots = sorted(found[0])
        for (a, wa), (b, wb) in zip(slots, slots[1:]):
            if b < a + wa and (a, wa) != (b, wb):
                return False  # overlapping slots of different widths
        if any(c < 0 or c + w > s.shape[0] for c, w in slots):
            return False
        self.regs[s.name] = {}
        self.reg_loops[s.name] = found[1]
        return True

    def reg_type(self, name: str, width: int) -> ll.Type:
        t = LTYPE[self.allocs[name].dtype]
        return ll.VectorType(t, width) if width > 1 else t

    def reg_access(self, name: str, index: tuple[ir.Expr, ...], value: ll.Value | None) -> ll.Value | None:
        """A load (``value`` None) or store of a promoted array's slot."""
        vec = self.vec
        if vec is not None and self.varying(index[0]):
            off = ir.const_int(vec.lane0(index[0]))
            if off is None or vec.lane_stride(index[0]) != 1:
                raise CodegenError(f"internal: {name}[{index[0]}] is not a slot access")
            key = (off, vec.width)
        else:
            off = ir.const_int(index[0])
            if off is None:
                raise CodegenError(f"internal: {name}[{index[0]}] is not a slot access")
            key = (off, 1)
        slots = self.regs[name]
        if value is None:
            if key not in slots:
                raise CodegenError(f"{name}[{index[0]}] is read before it is written")
            return slots[key]
        if key[1] > 1 and not _is_vec(value):
            value = self.splat(value, key[1])
        slots[key] = value
        return None

    def loop_slots(self, loop: ir.For) -> list[tuple[str, Slot]]:
        """The promoted slots a loop stores to (they need phis at the loop's header)."""
        return [(name, key) for name in self.regs for key in sorted(self.reg_loops[name].get(id(loop), ()))]

    def slot_phis(self, keys: list[tuple[str, Slot]], pre: ll.Block) -> list[ll.Instruction]:
        """At a loop header: a phi per slot, entered with the slot's value before the loop."""
        phis = []
        for name, key in keys:
            if key not in self.regs[name]:
                raise CodegenError(f"{name}: slot {key} is updated in a loop before it is written")
            phi = self.b.phi(self.reg_type(name, key[1]))
            phi.add_incoming(self.regs[name][key], pre)
            self.regs[name][key] = phi
            phis.append(phi)
        return phis

    def slot_exits(self, keys: list[tuple[str, Slot]], phis: list, pre: ll.Block, end: ll.Block) -> None:
        """After the loop (at its exit block): each slot is its value from the last trip, or
        from before the loop when the loop did not run."""
        for (name, key), phi in zip(keys, phis):
            last = self.regs[name][key]
            phi.add_incoming(last, end)
            out = self.b.phi(phi.type)
            out.add_incoming(phi.incomings[0][0], pre)
            out.add_incoming(last, end)
            self.regs[name][key] = out
