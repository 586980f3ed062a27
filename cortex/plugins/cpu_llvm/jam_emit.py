"""Jammed node groups of the ``llvm`` code generator: several nodes of a level at once.

Pipeline position: inside the ``llvm`` renderer, a part of the kernel emitter
(:class:`~cortex.plugins.cpu_llvm.kernel._KernelGen` inherits it). An interchanged level's node
loop runs in groups of ``JAM_STAGES`` sizes: every node-dependent value once per node, every
reduction one loop for the group with fused sibling reductions (one weight load feeds every
node), a failing guard or the nodes left over through one shared, compact copy of the body.
"""

from __future__ import annotations

from llvmlite import ir as ll

from cortex.core import loopir as ir
from cortex.plugins.cpu_llvm.ir_queries import _contains, _uses_var, _var_names, _walk, vector_width
from cortex.plugins.cpu_llvm.level_loops import (FUSE_ACCS, FUSE_BALANCED, JAM_PAD, JAM_STAGES, JAM_UNROLL,
                                                 _JamCtx, _no_self_reads)
from cortex.plugins.cpu_llvm.llvm_types import I1, I32, LTYPE, CodegenError, _is_vec


class _JamEmitter:
    """Node-jam methods of the kernel emitter (a mixin of ``_KernelGen``)."""

    def jammed_node_loop(self, s: ir.For, conds: list, taken: ir.Stmt) -> None:
        """``for v``: groups of nodes whose guards all hold run ``taken`` together (every
        reduction one loop for the group, so each weight load serves every node of it), in the
        group sizes of ``JAM_STAGES`` (8, then 4, 2, 1 for what is left). A group with a failing
        guard, and any nodes left after the last stage, run node by node through the plain body:
        one copy shared by every stage (its range and the stage it returns to are phis), which
        keeps the IR small (compile time)."""
        b = self.b
        lo, hi = self.expr(s.start), self.expr(s.stop)
        plain = ir.For(s.var, s.start, s.stop, s.body, "serial")
        lets: list[tuple[str, ir.Expr]] = []
        body = s.body
        while isinstance(body, ir.Let):
            lets.append((body.var, body.value))
            body = body.body
        pad = JAM_PAD and _no_self_reads(s.body, s.var)
        stages = [(m, least if pad else m) for m, least in JAM_STAGES]
        plain_bb, out_bb = self.block("jam_plain"), self.block("jam_out")
        p_lo, p_hi, p_ret = [], [], []  # (value, block) incoming for the plain path's phis
        dones: list[tuple[ll.Block, ll.Instruction]] = []
        v = lo
        for n, (m, least) in enumerate(stages):
            v = self._jam_groups(s, conds, taken, lets, v, hi, m, least, n, plain_bb, (p_lo, p_hi, p_ret), dones)
        # nodes left after the last stage: the plain body up to hi, then out
        p_lo.append((v, b.block))
        p_hi.append((hi, b.block))
        p_ret.append((ll.Constant(I32, -1), b.block))
        b.branch(plain_bb)
        b.position_at_end(plain_bb)
        phis = []
        for name, inc in (("plain_lo", p_lo), ("plain_hi", p_hi), ("plain_ret", p_ret)):
            phi = b.phi(I32, name=name)
            for val, bb in inc:
                phi.add_incoming(val, bb)
            phis.append(phi)
        self.compact += 1  # the exception (a failing guard) or the last node or two: small code
        try:
            self._plain_range(plain, phis[0], phis[1])
        finally:
            self.compact -= 1
        end = b.block
        sw = b.switch(phis[2], out_bb)
        for n, (done, nxt) in enumerate(dones):
            sw.add_case(ll.Constant(I32, n), done)
            nxt.add_incoming(phis[1], end)
        b.position_at_end(out_bb)
        self.last_loop_synced = False

    def _jam_groups(self, s: ir.For, conds: list, taken: ir.Stmt, lets: list, lo: ll.Value, hi: ll.Value,
                    m: int, least: int, stage: int, plain_bb: ll.Block, plain_in: tuple, dones: list) -> ll.Value:
        """Groups of ``m`` nodes from ``lo`` while ``least`` (<= m) nodes remain before ``hi``;
        returns the first node not done (the builder is positioned after the groups). With
        ``least < m`` a short last group repeats its last node (same inputs, same values stored
        to the same rows, so harmless when the body reads nothing it stores). A group with a
        failing guard goes to ``plain_bb`` for its nodes and comes back (``dones[stage]``)."""
        b = self.b
        pad = least < m
        pre = b.block
        head, group, single, one, done = (self.block(f"{n}{m}") for n in ("jam_head", "jam_group", "jam_single", "jam_one", "jam_done"))
        b.branch(head)
        b.position_at_end(head)
        v0 = b.phi(I32, name=f"{s.var}_jam{m}")
        v0.add_incoming(lo, pre)
        room = b.icmp_signed("<=", b.add(v0, ll.Constant(I32, least)), hi)
        if pad:
            last_node = b.sub(hi, ll.Constant(I32, 1))
        check = self.block(f"jam_check{m}")
        b.cbranch(room, check, single)
        b.position_at_end(check)
        copies: list[dict[str, tuple]] = []
        ok = ll.Constant(I1, 1)
        for q in range(m):
            vq = b.add(v0, ll.Constant(I32, q)) if q else v0
            if pad and q:
                vq = b.select(b.icmp_signed("<", vq, hi), vq, last_node)
            env = {s.var: (vq, ir.INT)}
            saved = {k: self.env.get(k) for k in env}
            self.env.update(env)
            for name, value in lets:
                env[name] = (self.expr(value), self.dtype(value))
                self.env[name] = env[name]
            for c in conds:
                ok = b.and_(ok, self.to_bool(c))
            for name in list(env):
                if saved.get(name) is None:
                    self.env.pop(name, None)
                else:
                    self.env[name] = saved[name]
            copies.append(env)
        b.cbranch(ok, group, one)
        # m nodes together
        b.position_at_end(group)
        self.jam = _JamCtx(set(copies[0]), copies, taken, _no_self_reads(s.body, s.var))
        try:
            self.jam_stmt(taken)
        finally:
            for name in copies[0]:
                self.env.pop(name, None)
            self.jam = None
        group_end = b.block
        b.branch(done)
        # a group with a failing guard: its nodes one by one (the shared plain body)
        b.position_at_end(one)
        end = b.add(v0, ll.Constant(I32, m))
        if pad:
            end = b.select(b.icmp_signed("<", end, hi), end, hi)
        for inc, val in zip(plain_in, (v0, end, ll.Constant(I32, stage))):
            inc.append((val, one))
        b.branch(plain_bb)
        b.position_at_end(done)
        nxt = b.phi(I32, name=f"{s.var}_next{m}")
        nxt.add_incoming(self._after(group_end, v0, m), group_end)
        dones.append((done, nxt))
        v0.add_incoming(nxt, done)
        b.branch(head)
        b.position_at_end(single)
        return v0

    def _after(self, block: ll.Block, v0: ll.Value, m: int) -> ll.Value:
        """``v0 + m`` computed at the end of ``block`` (before its terminator)."""
        b = ll.IRBuilder(block)
        b.position_before(block.terminator)
        return b.add(v0, ll.Constant(I32, m))

    def _plain_range(self, loop: ir.For, lo: ll.Value, hi: ll.Value) -> None:
        """``loop``'s body for ``lo <= var < hi`` (values already computed)."""
        lo_name, hi_name = f"{loop.var}__lo", f"{loop.var}__hi"
        self.env[lo_name], self.env[hi_name] = (lo, ir.INT), (hi, ir.INT)
        try:
            self.loop(ir.For(loop.var, ir.Var(lo_name), ir.Var(hi_name), loop.body, "serial"))
        finally:
            del self.env[lo_name], self.env[hi_name]

    def jam_switch(self, q: int) -> None:
        for name, val in self.jam.copies[q].items():
            self.env[name] = val
        if self.vec is not None:
            for name, val in self.jam.copies[q].items():
                if _is_vec(val[0]):
                    self.vec.varying.add(name)

    def _per_node(self, e: ir.Node) -> bool:
        """Does ``e`` use a name whose value differs between the jammed nodes?"""
        c0 = self.jam.copies[0]
        return any(name in self.jam.names and name in c0 and any(c[name][0] is not c0[name][0] for c in self.jam.copies)
                   for name in _var_names(e))

    def jam_dep(self, e: ir.Node) -> bool:
        return not self.jam.names.isdisjoint(_var_names(e))

    def jam_stmt(self, s: ir.Stmt) -> None:
        """A statement for every jammed node (node-dependent parts once per node)."""
        if isinstance(s, ir.Seq):
            for x in s.stmts:
                self.jam_stmt(x)
            return
        if isinstance(s, ir.For) and s.kind == "vectorized" and self.vec is None:
            self.vector_loop(s, vector_width(s), self.jam_stmt)
            return
        if isinstance(s, ir.Let):
            if not self.jam_dep(s.value):
                self.stmt(ir.Let(s.var, s.value, ir.Seq(())))  # validates; value is cheap to redo
                value = self.expr(s.value)
                for c in self.jam.copies:
                    c[s.var] = (value, self.dtype(s.value))
            else:
                for q, c in enumerate(self.jam.copies):
                    self.jam_switch(q)
                    c[s.var] = (self.expr(s.value), self.dtype(s.value))
            self.jam.names.add(s.var)
            if self.vec is not None and _is_vec(self.jam.copies[0][s.var][0]):
                self.vec.let_ir[s.var] = s.value
            try:
                self.jam_stmt(s.body)
            finally:
                self.jam.names.discard(s.var)
                for c in self.jam.copies:
                    c.pop(s.var, None)
                self.env.pop(s.var, None)
                if self.vec is not None:
                    self.vec.varying.discard(s.var)
                    self.vec.let_ir.pop(s.var, None)
            return
        if isinstance(s, ir.Store):
            for q in range(len(self.jam.copies)):
                self.jam_switch(q)
                self.store(s.buffer, s.index, self.expr(s.value))
            return
        raise CodegenError(f"internal: statement {type(s).__name__} in a jammed node group")

    def jam_reduce(self, e: ir.Reduce, q: int) -> ll.Value:
        """One loop computing reduction ``e`` for every jammed node (with up to ``FUSE`` - 1
        sibling reductions over the same range: see :meth:`_fusable`); returns node ``q``'s."""
        if e not in self.jam.reduces:
            self._jam_reduce_loop([(e, e), *self._fusable(e)])
        self.jam_switch(q)
        return self.jam.reduces[e][q]

    def _fusable(self, e: ir.Reduce) -> list[tuple[ir.Reduce, ir.Reduce]]:
        """Reductions of the jammed body over ``e``'s range that can be computed now, in ``e``'s
        loop: each loaded input (a child's ``h[c, k]``) then feeds several weight rows, so the
        loop is bound by FMAs, not loads. Needs a body that reads nothing it stores
        (``reorder_ok``), every name bound here, and no nested reduction. Those sharing most
        loads with ``e`` first; each as (the reduction, it over ``e``'s variable)."""
        n = len(self.jam.copies)
        room = FUSE_ACCS // n - 1
        if room <= 0 or not self.jam.reorder_ok:
            return []
        cands: list[tuple[int, int, ir.Reduce, ir.Reduce]] = []
        bound = set(self.env) | set(self.jam.copies[0])
        mine = {m for m in _walk(e.body) if isinstance(m, ir.Load)}
        for r in _walk(self.jam.body):
            if not isinstance(r, ir.Reduce) or r == e or r in self.jam.reduces:
                continue
            if (r.start, r.stop, r.op) != (e.start, e.stop, e.op) or any(r == c[2] for c in cands):
                continue
            if _contains(r.body, lambda m: isinstance(m, ir.Reduce)) or not self.jam_dep(r.body):
                continue
            names = {m.name for m in _walk(r.body) if isinstance(m, ir.Var)} - {r.var}
            if not names <= bound or e.var in names:
                continue
            body = ir.transform(r.body, lambda m, r=r: ir.Var(e.var) if isinstance(m, ir.Var) and m.name == r.var else None)
            shared = len(mine & {m for m in _walk(body) if isinstance(m, ir.Load)})
            cands.append((-shared, len(cands), r, ir.Reduce(r.op, e.var, r.start, r.stop, body)))
        cands.sort(key=lambda c: c[:2])
        if FUSE_BALANCED and cands:
            # the same number of loops, sizes as even as they go (10 reductions at most 3 a
            # loop: 3 3 2 2, not 3 3 3 1 -- a loop of one reduction per node has too few
            # accumulators to cover the FMA latency and a load for every FMA)
            total = len(cands) + 1
            loops = -(-total // (room + 1))
            room = -(-total // loops) - 1
        return [(r, renamed) for _, _, r, renamed in cands[:room]]

    def _jam_reduce_loop(self, group: list[tuple[ir.Reduce, ir.Reduce]]) -> None:
        b = self.b
        e = group[0][1]
        n = len(self.jam.copies)
        specs = []
        for key, r in group:
            dt = self.dtype(r.body)
            ty = LTYPE[dt]
            if self.varying(r.body) or any(_is_vec(c[m][0]) for c in self.jam.copies for m in c
                                           if _uses_var(r.body, m)):
                ty = ll.VectorType(ty, self.vec.width)
            init = self.const_like(ty, 0.0 if dt in ir.FLOAT_DTYPES else 0) if r.op != "max" else \
                self.const_like(ty, float("-inf") if dt in ir.FLOAT_DTYPES else -2**31)
            specs.append((r, dt, ty, init, key))
        lo, hi = self.expr(e.start), self.expr(e.stop)
        pre = b.block
        body_bb, exit_bb = self.block(f"jred_{e.var}"), self.block(f"jred_{e.var}_end")
        b.cbranch(b.icmp_signed("<", lo, hi), body_bb, exit_bb)
        b.position_at_end(body_bb)
        i = b.phi(I32, name=e.var)
        i.add_incoming(lo, pre)
        accs = [[b.phi(ty) for _ in range(n)] for _, _, ty, _, _ in specs]
        for (_, _, _, init, _), row in zip(specs, accs):
            for a in row:
                a.add_incoming(init, pre)
        # JAM_UNROLL iterations per trip when the trip count allows (LLVM's unroller is off)
        lo_c, hi_c = ir.const_int(e.start), ir.const_int(e.stop)
        unroll = JAM_UNROLL if (lo_c is not None and hi_c is not None and hi_c > lo_c
                                and (hi_c - lo_c) % JAM_UNROLL == 0) else 1
        nxts: list[list] = [list(row) for row in accs]
        self.jam_off += 1
        try:
            for u in range(unroll):
                iu = i if u == 0 else b.add(i, ll.Constant(I32, u), flags=["nsw"])
                self.env[e.var] = (iu, ir.INT)
                self.memo.clear()
                # a product's node-independent factor (the weight load) is emitted once, not per node
                for r, _, _, _, _ in specs:
                    if isinstance(r.body, ir.BinOp) and r.body.op == "*":
                        for x, y in ((r.body.a, r.body.b), (r.body.b, r.body.a)):
                            if x not in self.memo and not self._per_node(x) and self._per_node(y):
                                self.memo[x] = self.expr(x)
                                break
                for k in range(n):
                    self.jam_switch(k)
                    for g, (r, dt, _, _, _) in enumerate(specs):
                        nxts[g][k] = self.accumulate(r.op, dt, nxts[g][k], r.body)
        finally:
            del self.env[e.var]
            self.memo.clear()
            self.jam_off -= 1
        i_next = b.add(i, ll.Constant(I32, unroll), flags=["nsw"])
        end = b.block
        b.cbranch(b.icmp_signed("<", i_next, hi), body_bb, exit_bb)
        i.add_incoming(i_next, end)
        b.position_at_end(exit_bb)
        for g, (r, dt, ty, init, key) in enumerate(specs):
            outs = []
            for a, nxt in zip(accs[g], nxts[g]):
                a.add_incoming(nxt, end)
                out = b.phi(ty)
                out.add_incoming(init, pre)
                out.add_incoming(nxt, end)
                if r.op == "mean":
                    cnt = b.sitofp(b.select(b.icmp_signed(">", b.sub(hi, lo), ll.Constant(I32, 0)), b.sub(hi, lo),
                                            ll.Constant(I32, 1)), LTYPE[dt])
                    out, cnt = self.match(out, cnt)
                    out = b.fdiv(out, cnt)
                outs.append(out)
            self.jam.reduces[key] = outs

