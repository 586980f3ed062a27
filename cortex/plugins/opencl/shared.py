"""One tree on several work-groups: each level's work-group loop shared by claiming its units.

Pipeline position: between scheduling and rendering in the ``opencl`` backend, beside
``forms.single_group_kernel``, where the schedule records ``level_groups`` of at least 2 (the
knob's default needs ``Capabilities.groups_progress``). :func:`shared_kernel` derives, from
the same per-level program, the one-launch kernel ``cx_shared_levels`` for a launch of G
work-groups: the single-work-group kernel's body with every work-group loop marked ``dynamic``
and the work-group barriers between the inlined launches dropped. The renderer
(``vectors``) writes a ``dynamic`` work-group loop of this kernel as claimed units, the way the
llvm target's ``level_split="dynamic"`` shares a level between its threads:

* a unit (one iteration: a level's 16-unit hidden block, a node chunk) is claimed with an
  ``atomic_inc`` on the loop's global claim counter, until the counter passes the trip count;
* the loop's end is a wait on its global done counter: a group adds the units it ran and spins
  until every unit is done. A group waits only for units that a group which has started holds
  (one that starts late finds every unit claimed and falls through), so nothing depends on
  OpenCL running two groups at once: with one worker thread the first group runs everything,
  as the one-group kernel does, and the others find nothing left. It needs that a started
  group makes progress (``Capabilities.groups_progress``: PoCL's CPU device runs each group on
  an OS thread).

The counters sit in one ``int`` buffer ``cx_sync`` the runtime owns and passes as the kernel's
last argument: slot 0 counts the groups that finished; the k-th claimed loop the groups run
(they all run the same loops, bounds read only from read-only arrays) uses slots ``2k + 1``
(claims) and ``2k + 2`` (done). The last group to finish zeroes what was used, so the next call
starts from zeros without a fill (:func:`claim_slots` sizes the buffer on the host).

Each unit runs the same code as in the one-group kernel, so outputs are bit-identical. Only a
kernel whose groups have one work-item gets this form (every CPU schedule here: the claim is
the group's only work-item's); a statement outside the work-group loops that is not a let of
read-only data, a barrier inside a work-group loop or a bound that reads a written buffer leave
the program without it (it runs as one work-group, as before).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from cortex.core import loopir as ir
from cortex.plugins.opencl import forms

SHARED_KERNEL = "cx_shared_levels"
SYNC = "cx_sync"  # the kernel's counter buffer (its last argument)
SLOT = "cx_k"  # the kernel's running slot index


def _stable(e: ir.Node, read_only: frozenset[str]) -> bool:
    """``e`` reads no buffer that a kernel writes (so every group computes the same value)."""
    return all(n.buffer in read_only for n in ir.walk(e) if isinstance(n, ir.Load))


def shared_kernel(program: ir.Program) -> ir.Kernel:
    """The ``cx_shared_levels`` kernel of ``program`` (see the module doc); raises
    :class:`ValueError` where the program does not have that shape."""
    single = forms.single_group_kernel(program)
    if single.threads_per_group > 1 or any(isinstance(n, ir.For) and n.kind == "gpu_thread"
                                           for n in ir.walk(single.body)):
        raise ValueError("a work-group of several work-items: the claim is made by a group's only work-item")
    read_only = frozenset(b.name for b in program.buffers if b.read_only)

    def claim(s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Seq):
            return ir.seq(*(claim(x) for x in s.stmts))
        if isinstance(s, ir.Barrier):
            return ir.Seq(())  # the wait at the end of each claimed loop is the barrier
        if isinstance(s, ir.For) and s.kind == "gpu_group":
            if any(isinstance(n, (ir.Barrier, ir.For)) and (isinstance(n, ir.Barrier) or n.kind == "gpu_group")
                   for n in ir.walk(s.body)):
                raise ValueError(f"work-group loop {s.var} holds a barrier or another work-group loop")
            if not (_stable(s.start, read_only) and _stable(s.stop, read_only)):
                raise ValueError(f"work-group loop {s.var}: its bounds read a buffer a kernel writes")
            return replace(s, annotations=tuple(dict.fromkeys(s.annotations + ("dynamic",))))
        if isinstance(s, ir.For) and s.kind == "serial":
            if not (_stable(s.start, read_only) and _stable(s.stop, read_only)):
                raise ValueError(f"loop {s.var}: its bounds read a buffer a kernel writes")
            return replace(s, body=claim(s.body))
        if isinstance(s, ir.Let):
            if not _stable(s.value, read_only):
                raise ValueError(f"let {s.var} outside the work-group loops reads a buffer a kernel writes")
            return replace(s, body=claim(s.body))
        raise ValueError(f"a statement outside the work-group loops: {type(s).__name__}")

    return ir.Kernel(SHARED_KERNEL, (), claim(single.body), 1)


def with_shared_kernel(program: ir.Program) -> ir.Program:
    """``program`` plus :func:`shared_kernel`; raises ValueError when it cannot be derived."""
    return replace(program, kernels=program.kernels + (shared_kernel(program),))


def claimed(s: ir.Node) -> bool:
    return isinstance(s, ir.For) and s.kind == "gpu_group" and "dynamic" in s.annotations


def claim_slots(kernel: ir.Kernel, sizes: Mapping[str, int]) -> int:
    """How many claimed loops a launch of ``kernel`` runs for these sizes (each takes two
    counters of ``cx_sync``); raises :class:`ValueError` when a loop bound is unknown here."""

    def count(s: ir.Node, env: dict[str, int]) -> int:
        if claimed(s):
            return 1
        if isinstance(s, ir.Seq):
            return sum(count(x, env) for x in s.stmts)
        if isinstance(s, ir.Let):
            return count(s.body, env)
        if isinstance(s, ir.For):
            inner = sum(1 for n in ir.walk(s.body) if claimed(n))
            if not inner:
                return 0
            try:
                lo, hi = forms.evaluate(s.start, env, {}), forms.evaluate(s.stop, env, {})
            except forms._Unknown:
                raise ValueError(f"loop {s.var}'s bounds are not known on the host") from None
            total = 0
            for i in range(lo, hi):
                total += count(s.body, {**env, s.var: i})
            return total
        return 0

    return count(kernel.body, dict(sizes))


def claimed_loop(var: str, start: str, stop: str, body: list[str], pad: str) -> list[str]:
    """OpenCL C of a claimed loop over ``[start, stop)`` whose rendered ``body`` binds ``var``:
    units claimed one at a time, then the units run added to the done counter and the wait
    for all of them (see the module doc)."""
    n, ran, unit = f"{var}__n", f"{var}__ran", f"{var}__u"
    claim = f"atomic_inc(&{SYNC}[{SLOT}])"
    return [
        f"{pad}{{",
        f"{pad}  const int {var}__lo = {start};",
        f"{pad}  const int {n} = ({stop}) - {var}__lo;",
        f"{pad}  int {ran} = 0;",
        f"{pad}  for (int {unit} = {claim}; {unit} < {n}; {unit} = {claim}) {{",
        f"{pad}    const int {var} = {var}__lo + {unit};",
        *body,
        f"{pad}    ++{ran};",
        f"{pad}  }}",
        f"{pad}  mem_fence(CLK_GLOBAL_MEM_FENCE);",
        f"{pad}  if (atomic_add(&{SYNC}[{SLOT} + 1], {ran}) + {ran} < {n})",
        f"{pad}    while (atomic_or(&{SYNC}[{SLOT} + 1], 0) < {n}) {{}}",
        f"{pad}  mem_fence(CLK_GLOBAL_MEM_FENCE);",
        f"{pad}  {SLOT} += 2;",
        f"{pad}}}",
    ]


def kernel_text(text: str) -> str:
    """The rendered ``cx_shared_levels`` with the counter buffer as its last parameter, the
    slot index declared and, at its end, the last group zeroing the counters it used."""
    head, rest = text.split("\n", 1)
    if not head.endswith(") {") or not rest.endswith("\n}"):
        raise ValueError("unexpected kernel text")
    head = head[: -len(") {")] + f", __global volatile int* {SYNC}) {{"
    done = ["  mem_fence(CLK_GLOBAL_MEM_FENCE);",
            f"  if (atomic_inc(&{SYNC}[0]) == (int)get_num_groups(0) - 1) {{",
            f"    for (int cx_i = 1; cx_i < {SLOT}; ++cx_i) {SYNC}[cx_i] = 0;",
            f"    {SYNC}[0] = 0;",
            "  }"]
    return "\n".join([head, f"  int {SLOT} = 1;", rest[: -len("\n}")], *done, "}"])
