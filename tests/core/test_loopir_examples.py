"""Hand-built LoopPrograms shared by the LoopProgram tests (and a check that they are sound).

* ``tree_rnn``: a mini binary TreeRNN, h[v] = tanh(W @ (h[c0] + h[c1]) + b), leaves
  h[v] = Emb[word[v]]; indirect child loads through ``child_table`` guarded by a select.
* ``child_sum``: child-sum over CSR children into a private array, then
  h[v] = sigmoid(U @ sum_c h[c] + b).

Both come in the two host forms (one persistent kernel with the level loop inside and a
grid barrier, or one launch per level) and with leaf specialization on or off. The tiny
linearizer below builds ``LinearizedBatch`` objects from random trees, following the contract
in ``cortex/core/linearize/structure.py`` (level-ordered ids, leaves first).
"""

from __future__ import annotations

import numpy as np

from cortex.core import loopir as ir
from cortex.core.linearize.structure import INDEX_DTYPE, LinearizedBatch
from cortex.core.loopir import For, Let, Load, Select, Store, Var, call, fconst, seq

N, L, NL, E = Var("N"), Var("L"), Var("NL"), Var("E")
lvl = Var("l")


def index_buffers(vocab: int, arity: int = 2) -> tuple[ir.Buffer, ...]:
    return (
        ir.Buffer("level_offsets", "int32", (L + 1,), "index", (ir.Const(0), N), monotone=True),
        ir.Buffer("child_table", "int32", (N, arity), "index", (ir.Const(-1), N - 1)),
        ir.Buffer("child_offsets", "int32", (N + 1,), "index", (ir.Const(0), E), monotone=True),
        ir.Buffer("child_ids", "int32", (E,), "index", (ir.Const(0), N - 1)),
        ir.Buffer("word_ids", "int32", (N,), "index", (ir.Const(-1), ir.Const(vocab - 1))),
    )


SIZES = (ir.Size("N"), ir.Size("L"), ir.Size("NL", hi=N), ir.Size("E"))


def _leaf_store(v: str, H: int, dtype: str) -> ir.Stmt:
    w = Var(f"w_{v}")
    j = f"j_{v}leaf"
    val = Select(w >= 0, Load("Emb", (w, Var(j))), fconst(0.0, dtype))
    return Let(w.name, Load("word_ids", (Var(v),)), For(j, 0, H, Store("h", (Var(v), Var(j)), val), "parallel"))


def _node_range(level: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
    return Load("level_offsets", (level,)), Load("level_offsets", (level + 1,))


def _form(name: str, sizes, buffers, leaf: ir.Stmt | None, level_body, form: str, first_level: int) -> ir.Program:
    """Assemble the host structure: 'single' (level loop in one kernel) or 'per_level'."""
    if form == "single":
        body_parts = []
        if leaf is not None:
            body_parts += [leaf, ir.Barrier("grid")]
        body_parts.append(For("l", first_level, L, seq(level_body(lvl), ir.Barrier("grid"))))
        kernels = (ir.Kernel("main", (), seq(*body_parts)),)
        host: tuple = (ir.Launch("main"),)
    elif form == "per_level":
        kernels = (ir.Kernel("level", ("l",), level_body(lvl)),)
        host = (ir.HostFor("lh", first_level, L, (ir.Launch("level", (Var("lh"),)),)),)
        if leaf is not None:
            kernels = (ir.Kernel("leaves", (), leaf),) + kernels
            host = (ir.Launch("leaves"),) + host
    else:
        raise ValueError(form)
    return ir.Program(name, sizes, buffers, kernels, host)


def tree_rnn(H: int = 8, V: int = 11, dtype: str = "float64", form: str = "single", leaf_spec: bool = True) -> ir.Program:
    buffers = index_buffers(V) + (
        ir.Buffer("Emb", dtype, (V, H), "param"),
        ir.Buffer("W", dtype, (H, H), "param"),
        ir.Buffer("b", dtype, (H,), "param"),
        ir.Buffer("h", dtype, (N, H), "output"),
    )
    zero = fconst(0.0, dtype)
    v, j, k = Var("v"), Var("j"), Var("k")
    c0, c1 = Var("c0"), Var("c1")

    def child(c: Var) -> ir.Expr:
        return Select(c >= 0, Load("h", (c, k)), zero)

    def internal(level: ir.Expr) -> ir.Stmt:
        gemv = ir.Reduce("sum", "k", 0, H, Load("W", (j, k)) * (child(c0) + child(c1)))
        node = Let("c0", Load("child_table", (v, 0)), Let("c1", Load("child_table", (v, 1)),
                   For("j", 0, H, Store("h", (v, j), call("tanh", gemv + Load("b", (j,)))), "parallel")))
        if not leaf_spec:  # one loop nest for every node: a per-node branch on arity
            node = ir.If(ir.eq(Load("child_table", (v, 0)), -1), _leaf_store("v", H, dtype), node)
        lo, hi = _node_range(level)
        return For("v", lo, hi, node, "parallel")

    leaf = For("u", 0, NL, _leaf_store("u", H, dtype), "parallel") if leaf_spec else None
    return _form("tree_rnn", SIZES, buffers, leaf, internal, form, 1 if leaf_spec else 0)


def child_sum(H: int = 8, V: int = 11, dtype: str = "float64", form: str = "single", leaf_spec: bool = True) -> ir.Program:
    buffers = index_buffers(V, arity=4) + (
        ir.Buffer("Emb", dtype, (V, H), "param"),
        ir.Buffer("U", dtype, (H, H), "param"),
        ir.Buffer("b", dtype, (H,), "param"),
        ir.Buffer("h", dtype, (N, H), "output"),
    )
    v, j, k = Var("v"), Var("j"), Var("k")

    def internal(level: ir.Expr) -> ir.Stmt:
        csum = ir.Reduce("sum", "e", Load("child_offsets", (v,)), Load("child_offsets", (v + 1,)),
                         Load("h", (Load("child_ids", (Var("e"),)), k)))
        gemv = ir.Reduce("sum", "kk", 0, H, Load("U", (j, Var("kk"))) * Load("xs", (Var("kk"),)))
        node = ir.Alloc("xs", dtype, (H,), "private", seq(
            For("k", 0, H, Store("xs", (k,), csum), "vectorized"),
            For("j", 0, H, Store("h", (v, j), call("sigmoid", gemv + Load("b", (j,)))), "vectorized"),
        ))
        if not leaf_spec:
            node = ir.If(ir.eq(Load("child_offsets", (v,)), Load("child_offsets", (v + 1,))),
                         _leaf_store("v", H, dtype), node)
        lo, hi = _node_range(level)
        return For("v", lo, hi, node, "parallel")

    leaf = For("u", 0, NL, _leaf_store("u", H, dtype), "parallel") if leaf_spec else None
    return _form("child_sum", SIZES, buffers, leaf, internal, form, 1 if leaf_spec else 0)


def tree_lstm(H: int = 8, V: int = 11, dtype: str = "float64", form: str = "single") -> ir.Program:
    """Binary TreeLSTM (Tai et al. 2015, N-ary) in the fused form the lowering should produce.

    Leaves:   [i; o; u] = W @ Emb[word] + bW;  c = sig(i) * tanh(u);  h = sig(o) * tanh(c)
    Internal: [i; fl; fr; o; u] = U @ [h_l; h_r] + bU  (one stacked GEMV)
              c = sig(i) * tanh(u) + sig(fl) * c_l + sig(fr) * c_r;  h = sig(o) * tanh(c)
    Per node and hidden unit ``j``, the five gate rows ``t*H + j`` are reduced and consumed by
    the elementwise epilogue in the same loop nest: no gate temporaries, only h and c.
    """
    buffers = index_buffers(V) + (
        ir.Buffer("Emb", dtype, (V, H), "param"),
        ir.Buffer("W", dtype, (3 * H, H), "param"),
        ir.Buffer("bW", dtype, (3 * H,), "param"),
        ir.Buffer("U", dtype, (5 * H, 2 * H), "param"),
        ir.Buffer("bU", dtype, (5 * H,), "param"),
        ir.Buffer("h", dtype, (N, H), "output"),
        ir.Buffer("c", dtype, (N, H), "output"),
    )
    zero = fconst(0.0, dtype)
    j = Var("j")

    def sig(x: ir.Expr) -> ir.Expr:
        return call("sigmoid", x)

    jl = Var("jl")  # leaves' hidden loop (loop names are unique per program, for the transforms)

    def leaf_gate(t: int, x: Var) -> ir.Expr:
        k = f"k{t}"
        row = jl + t * H
        emb = Select(x >= 0, Load("Emb", (x, Var(k))), zero)
        return ir.Reduce("sum", k, 0, H, Load("W", (row, Var(k))) * emb) + Load("bW", (row,))

    def node_gate(t: int, cl: Var, cr: Var) -> ir.Expr:
        row = j + t * H
        kl, kr = f"kl{t}", f"kr{t}"
        left = ir.Reduce("sum", kl, 0, H, Load("U", (row, Var(kl))) * Select(cl >= 0, Load("h", (cl, Var(kl))), zero))
        right = ir.Reduce("sum", kr, 0, H, Load("U", (row, Var(kr) + H)) * Select(cr >= 0, Load("h", (cr, Var(kr))), zero))
        return left + right + Load("bU", (row,))

    def child_c(cv: Var) -> ir.Expr:
        return Select(cv >= 0, Load("c", (cv, j)), zero)

    u, v = Var("u"), Var("v")
    x = Var("x")
    cell = Var("cell", dtype)
    g = {name: Var(name, dtype) for name in ("gi", "gfl", "gfr", "go", "gu")}

    def lets(bindings: list[tuple[str, ir.Expr]], body: ir.Stmt) -> ir.Stmt:
        for name, value in reversed(bindings):
            body = Let(name, value, body)
        return body

    leaf_unit = lets([
        ("gi", sig(leaf_gate(0, x))), ("go", sig(leaf_gate(1, x))), ("gu", call("tanh", leaf_gate(2, x))),
        ("cell", g["gi"] * g["gu"]),
    ], seq(Store("c", (u, jl), cell), Store("h", (u, jl), g["go"] * call("tanh", cell))))
    leaf = For("u", 0, NL, Let("x", Load("word_ids", (u,)), For("jl", 0, H, leaf_unit, "parallel")), "parallel")

    def internal(level: ir.Expr) -> ir.Stmt:
        cl, cr = Var("cl"), Var("cr")
        unit = lets([
            ("gi", sig(node_gate(0, cl, cr))), ("gfl", sig(node_gate(1, cl, cr))), ("gfr", sig(node_gate(2, cl, cr))),
            ("go", sig(node_gate(3, cl, cr))), ("gu", call("tanh", node_gate(4, cl, cr))),
            ("cell", g["gi"] * g["gu"] + g["gfl"] * child_c(cl) + g["gfr"] * child_c(cr)),
        ], seq(Store("c", (v, j), cell), Store("h", (v, j), g["go"] * call("tanh", cell))))
        node = Let("cl", Load("child_table", (v, 0)), Let("cr", Load("child_table", (v, 1)), For("j", 0, H, unit, "parallel")))
        lo, hi = _node_range(level)
        return For("v", lo, hi, node, "parallel")

    return ir.simplify(_form("tree_lstm", SIZES, buffers, leaf, internal, form, 1))  # type: ignore[return-value]


def tree_lstm_reference(batch: LinearizedBatch, bufs: dict) -> tuple[np.ndarray, np.ndarray]:
    f = {k: np.asarray(v, dtype=np.float64) for k, v in bufs.items() if k in ("Emb", "W", "bW", "U", "bU")}
    H = f["Emb"].shape[1]
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    h = np.zeros((batch.num_nodes, H))
    c = np.zeros((batch.num_nodes, H))
    for n in range(batch.num_nodes):
        kids = batch.children(n)
        if len(kids) == 0:
            g = f["W"] @ f["Emb"][batch.word_ids[n]] + f["bW"]
            i, o, uu = np.split(g, 3)
            c[n] = sig(i) * np.tanh(uu)
        else:
            g = f["U"] @ np.concatenate([h[kids[0]], h[kids[1]]]) + f["bU"]
            i, fl, fr, o, uu = np.split(g, 5)
            c[n] = sig(i) * np.tanh(uu) + sig(fl) * c[kids[0]] + sig(fr) * c[kids[1]]
        h[n] = sig(o) * np.tanh(c[n])
    return h, c


# ----------------------------------------------------------------------------- data


def random_batch(rng: np.random.Generator, n_trees: int = 3, max_leaves: int = 7, arity: int | None = 2, vocab: int = 11) -> LinearizedBatch:
    """Random trees (binary when ``arity`` is 2, else 1..4 children) linearized by height."""
    children: list[list[int]] = []  # user numbering: any order
    roots = []
    node_input = []
    for t in range(n_trees):
        frontier = []
        for _ in range(int(rng.integers(1, max_leaves + 1))):
            children.append([])
            node_input.append(t)
            frontier.append(len(children) - 1)
        while len(frontier) > 1:
            k = 2 if arity == 2 else int(rng.integers(1, min(4, len(frontier)) + 1))
            picks = sorted(rng.choice(len(frontier), size=k, replace=False))
            kids = [frontier[p] for p in picks]
            for p in reversed(picks):
                frontier.pop(p)
            children.append(kids)
            node_input.append(t)
            frontier.insert(int(picks[0]), len(children) - 1)
        roots.append(frontier[0])
    n = len(children)
    height = [0] * n
    for u in range(n):  # children are created before parents
        height[u] = 1 + max((height[c] for c in children[u]), default=-1)
    order = sorted(range(n), key=lambda u: (height[u], u))
    new = {u: i for i, u in enumerate(order)}
    levels = np.bincount([height[u] for u in order])
    level_offsets = np.concatenate([[0], np.cumsum(levels)]).astype(INDEX_DTYPE)
    kids_new = [[new[c] for c in children[u]] for u in order]
    child_offsets = np.concatenate([[0], np.cumsum([len(k) for k in kids_new])]).astype(INDEX_DTYPE)
    child_ids = np.array([c for k in kids_new for c in k], dtype=INDEX_DTYPE)
    max_ar = max((len(k) for k in kids_new), default=0)
    table = np.full((n, max(max_ar, arity or 4)), -1, dtype=INDEX_DTYPE)
    for i, k in enumerate(kids_new):
        table[i, : len(k)] = k
    words = np.array([int(rng.integers(0, vocab)) if not kids_new[i] else -1 for i in range(n)], dtype=INDEX_DTYPE)
    return LinearizedBatch(
        num_nodes=n, level_offsets=level_offsets, child_offsets=child_offsets, child_ids=child_ids,
        child_table=table, roots=np.array([new[r] for r in roots], dtype=INDEX_DTYPE),
        node_input=np.array([node_input[u] for u in order], dtype=INDEX_DTYPE), word_ids=words,
    )


def inputs(batch: LinearizedBatch, program: ir.Program, rng: np.random.Generator) -> tuple[dict, dict]:
    """Buffers and sizes for ``program`` on ``batch``, with random parameters."""
    sizes = {"N": batch.num_nodes, "L": batch.num_levels, "NL": batch.num_leaves, "E": len(batch.child_ids)}
    width = ir.const_int(program.buffer("child_table").shape[1])
    table = np.full((batch.num_nodes, width), -1, dtype=INDEX_DTYPE)
    table[:, : batch.max_arity] = batch.child_table
    bufs = {
        "level_offsets": batch.level_offsets, "child_table": table,
        "child_offsets": batch.child_offsets, "child_ids": batch.child_ids, "word_ids": batch.word_ids,
    }
    for b in program.buffers:
        if b.role == "param":
            shape = tuple(ir.const_int(d) for d in b.shape)
            bufs[b.name] = (rng.standard_normal(shape) * 0.5).astype(b.dtype)
    return bufs, sizes


def scheduled_case(program: ir.Program, seed: int = 0, arity: int | None = 2) -> tuple[dict, dict, LinearizedBatch]:
    """:func:`inputs` on a random 4-tree batch, with every param in the layout ``program``'s
    schedule gave it (packed weights etc.): buffers, sizes and the batch."""
    from cortex.core.lowering import transforms as T

    rng = np.random.default_rng(seed)
    batch = random_batch(rng, n_trees=4, arity=arity)
    bufs, sizes = inputs(batch, program, rng)
    for b in program.buffers:
        if b.layout != ("row_major",):
            logical = [ir.const_int(d) for d in b.logical_shape]
            bufs[b.name] = T.to_layout(bufs[b.name].reshape(logical), b.layout)
    return bufs, sizes, batch


def reference(name: str, batch: LinearizedBatch, bufs: dict) -> np.ndarray:
    """A plain per-node NumPy loop computing the same model (float64)."""
    emb = bufs["Emb"].astype(np.float64)
    h = np.zeros((batch.num_nodes, emb.shape[1]))
    for v in range(batch.num_nodes):
        kids = batch.children(v)
        if len(kids) == 0:
            h[v] = emb[batch.word_ids[v]]
        elif name == "tree_rnn":
            x = sum((h[c] for c in kids), np.zeros(emb.shape[1]))
            h[v] = np.tanh(bufs["W"].astype(np.float64) @ x + bufs["b"])
        else:
            x = h[kids].sum(axis=0)
            h[v] = 1 / (1 + np.exp(-(bufs["U"].astype(np.float64) @ x + bufs["b"])))
    return h


BUILDERS = {"tree_rnn": tree_rnn, "child_sum": child_sum}


def test_random_batches_satisfy_the_linearizer_contract():
    rng = np.random.default_rng(0)
    for arity in (2, None):
        b = random_batch(rng, 4, arity=arity)
        lo = b.level_offsets
        assert lo[0] == 0 and lo[-1] == b.num_nodes and (np.diff(lo) > 0).all()
        for v in range(b.num_nodes):
            kids = b.children(v)
            assert all(c < v for c in kids)
            if v < b.num_leaves:
                assert len(kids) == 0
            else:
                assert len(kids) >= 1
                if arity == 2:
                    assert len(kids) == 2
