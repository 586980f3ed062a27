"""State-dict importers for the tree models (``cortex.models.importers``): Tai et al.'s binary
Tree-LSTM as its PyTorch ports name it, DGL's Tree-LSTM example (N-ary and child-sum cells),
and the documented TreeGRU layout.

Each layout's state dict is built with NumPy arrays under the layout's key names (what the
importer sees from ``module.state_dict()`` after ``.numpy()``), so these tests need no torch;
the expected states come from an independent NumPy transcription of the PyTorch module's
forward pass, node by node over the user's structure (not from Cortex's graph machinery).
Where torch is installed, the same layouts are also built as real ``torch.nn`` modules and
their outputs compared (float32, 1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest

import cortex
from cortex.core.frontend.model_errors import ParamError
from cortex.core.frontend.reference import evaluate
from cortex.core.plugin.loader import get_registry
from cortex.models import (ChildSumTreeLSTM, TreeGRU, TreeLSTM, load_dgl_treelstm,
                           load_torch_binary_treelstm, load_torch_childsum, load_torch_treegru)
from zoo_structures import Structure, make_batch

V, X, H = 11, 4, 5  # vocabulary, embedding width, hidden


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def random_tree(rng, leaves: int, arity: int) -> Structure:
    """A random full ``arity``-ary tree with a token on every node (user numbering)."""
    children: list[list[int]] = [[] for _ in range(leaves)]
    pending = list(range(leaves))
    while len(pending) > 1:
        while len(pending) < arity:
            children.append([])
            pending.append(len(children) - 1)
        picks = sorted(rng.choice(len(pending), size=arity, replace=False))
        children.append([pending[i] for i in picks])
        pending = [p for i, p in enumerate(pending) if i not in set(picks)] + [len(children) - 1]
    return Structure(children, words=[int(w) for w in rng.integers(0, V, len(children))])


def random_dependency_tree(rng, n: int) -> Structure:
    children: list[list[int]] = [[] for _ in range(n)]
    for v in range(1, n):
        children[int(rng.integers(0, v))].append(v)
    return Structure(children, words=[int(w) for w in rng.integers(0, V, n)])


def fake(rng, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """A state dict of NumPy arrays (what ``{k: v.numpy() for k, v in sd.items()}`` gives)."""
    return {k: rng.normal(0.0, 0.5, shape) for k, shape in shapes.items()}


def by_hand(structure: Structure, node) -> dict[int, dict[str, np.ndarray]]:
    """``node(v, child_states) -> states`` for every node, children first."""
    states: dict[int, dict[str, np.ndarray]] = {}

    def visit(v: int) -> None:
        for c in structure.children[v]:
            if c not in states:
                visit(c)
        states[v] = node(v, [states[c] for c in structure.children[v]])

    visit(structure.root)
    return states


def assert_matches(model, structures, expected, tol=1e-10) -> None:
    batch, ids = make_batch(structures)
    out = evaluate(model.trace(), model.params, batch)
    for b, states in enumerate(expected):
        for v, st in states.items():
            for name, value in st.items():
                np.testing.assert_allclose(out[name][ids[b][v]], value, rtol=tol, atol=tol)


# --------------------------------------------------------------------------------------------
# Tai et al.'s binary Tree-LSTM (leaf_module + composer)
# --------------------------------------------------------------------------------------------

COMPOSER = ("ilh", "irh", "lflh", "lfrh", "rflh", "rfrh", "ulh", "urh", "olh", "orh")


def binary_state_dict(rng, prefix: str = "") -> dict[str, np.ndarray]:
    shapes = {"emb.weight": (V, X)}
    for m in ("cx", "ox"):
        shapes[f"{prefix}leaf_module.{m}.weight"] = (H, X)
        shapes[f"{prefix}leaf_module.{m}.bias"] = (H,)
    for m in COMPOSER:
        shapes[f"{prefix}composer.{m}.weight"] = (H, H)
        shapes[f"{prefix}composer.{m}.bias"] = (H,)
    return fake(rng, shapes)


def binary_by_hand(sd, s: Structure, prefix: str = ""):
    lin = lambda m, x: sd[f"{prefix}{m}.weight"] @ x + sd[f"{prefix}{m}.bias"]  # noqa: E731

    def node(v, kids):
        if not kids:  # BinaryTreeLeafModule
            x = sd["emb.weight"][s.words[v]]
            c = lin("leaf_module.cx", x)
            return {"c": c, "h": sigmoid(lin("leaf_module.ox", x)) * np.tanh(c)}
        (lc, lh), (rc, rh) = ((k["c"], k["h"]) for k in kids)  # BinaryTreeComposer
        gate = lambda a, b: lin(f"composer.{a}", lh) + lin(f"composer.{b}", rh)  # noqa: E731
        i, lf, rf = sigmoid(gate("ilh", "irh")), sigmoid(gate("lflh", "lfrh")), sigmoid(gate("rflh", "rfrh"))
        o, u = sigmoid(gate("olh", "orh")), np.tanh(gate("ulh", "urh"))
        c = i * u + lf * lc + rf * rc
        return {"c": c, "h": o * np.tanh(c)}

    return by_hand(s, node)


def binary_model(**kw):
    return TreeLSTM(hidden=H, embed=X, vocab=V, leaf="linear", forget_bias="per_child",
                    dtype="float64", **kw)


@pytest.mark.parametrize("prefix", ["", "tree_module."])
def test_binary_treelstm_of_tai_et_al(prefix):
    rng = np.random.default_rng(1)
    sd = binary_state_dict(rng, prefix)
    sd["output_module.l1.weight"] = rng.normal(size=(3, H))  # a classifier: not the recursion
    model = binary_model()
    load_torch_binary_treelstm(model, sd)  # the prefix is found; emb.weight is the table
    trees = [random_tree(rng, n, 2) for n in (1, 2, 5, 9)]
    assert_matches(model, trees, [binary_by_hand(sd, t, prefix) for t in trees])


def test_binary_treelstm_without_biases_and_with_embedding_given():
    rng = np.random.default_rng(2)
    sd = {k: v for k, v in binary_state_dict(rng).items() if k.startswith("composer.") and k.endswith(".weight")
          or k.startswith("leaf_module.")}
    table = rng.normal(size=(V, X))
    model = binary_model()
    load_torch_binary_treelstm(model, sd, embedding=table)
    assert np.array_equal(model.params["b_i"], np.zeros(H)) and np.array_equal(model.params["E"], table)


def test_binary_treelstm_refuses_what_it_cannot_map():
    rng = np.random.default_rng(3)
    sd = binary_state_dict(rng)
    with pytest.raises(ParamError, match=r"this layout is a TreeLSTM with leaf='linear'; the model "
                                         r"has leaf='gated': build it with TreeLSTM\(\.\.\., leaf='linear'\)"):
        load_torch_binary_treelstm(TreeLSTM(hidden=H, embed=X, vocab=V, forget_bias="per_child"), sd)
    with pytest.raises(ParamError, match=r"forget_bias='per_child'"):
        load_torch_binary_treelstm(TreeLSTM(hidden=H, embed=X, vocab=V, leaf="linear"), sd)
    no_output_gate = {k: v for k, v in sd.items() if ".ox." not in k and ".olh." not in k and ".orh." not in k}
    with pytest.raises(ParamError, match="gate_output=False"):
        load_torch_binary_treelstm(binary_model(), no_output_gate)
    with pytest.raises(ParamError, match=r"unexpected keys \['composer.ix.weight'\]"):
        load_torch_binary_treelstm(binary_model(), {**sd, "composer.ix.weight": np.zeros((H, X))})
    with pytest.raises(ParamError, match=r"'leaf_module.cx.weight' has shape \(5, 4\); this model needs \(6, 4\)"):
        load_torch_binary_treelstm(TreeLSTM(hidden=6, embed=X, vocab=V, leaf="linear",
                                            forget_bias="per_child"), sd)
    with pytest.raises(ParamError, match="several modules of this layout"):
        load_torch_binary_treelstm(binary_model(), {**sd, **binary_state_dict(rng, "other.")})
    with pytest.raises(ParamError, match="no 'leaf_module.cx.weight' key, so it is not this layout"):
        load_torch_binary_treelstm(binary_model(), {"cell.W_iou.weight": np.zeros((3 * H, X))})


# --------------------------------------------------------------------------------------------
# DGL's Tree-LSTM example: TreeLSTMCell (N-ary) and ChildSumTreeLSTMCell
# --------------------------------------------------------------------------------------------


def dgl_state_dict(rng, n: int | None, prefix: str = "cell.") -> dict[str, np.ndarray]:
    """The keys of DGL's ``TreeLSTM`` module (``n=None``: the child-sum cell)."""
    width = H if n is None else n * H
    return fake(rng, {"embedding.weight": (V, X), f"{prefix}W_iou.weight": (3 * H, X),
                      f"{prefix}U_iou.weight": (3 * H, width), f"{prefix}b_iou": (1, 3 * H),
                      f"{prefix}U_f.weight": (width, width), f"{prefix}U_f.bias": (width,),
                      "linear.weight": (5, H), "linear.bias": (5,)})


def dgl_by_hand(sd, s: Structure, child_sum: bool):
    """DGL's message passing, node by node: leaves get ``iou = W_iou x`` and ``c = 0``; a node
    with children reduces its mailbox (children in order) and applies ``b_iou``."""
    W_iou, U_iou, b_iou = sd["cell.W_iou.weight"], sd["cell.U_iou.weight"], sd["cell.b_iou"][0]
    U_f, b_f = sd["cell.U_f.weight"], sd["cell.U_f.bias"]

    def node(v, kids):
        x = sd["embedding.weight"][s.words[v]]
        if not kids:
            iou, c = W_iou @ x, np.zeros(H)
        else:
            hs, cs = np.stack([k["h"] for k in kids]), np.stack([k["c"] for k in kids])
            if child_sum:  # reduce_func of ChildSumTreeLSTMCell; every node has a word here
                f = sigmoid(hs @ U_f.T + b_f)
                iou, c = W_iou @ x + U_iou @ hs.sum(0), (f * cs).sum(0)
            else:  # reduce_func of TreeLSTMCell; internal nodes have no word (mask 0)
                h_cat = hs.reshape(-1)
                f = sigmoid(U_f @ h_cat + b_f).reshape(hs.shape)
                iou, c = U_iou @ h_cat, (f * cs).sum(0)
        i, o, u = np.split(iou + b_iou, 3)
        c = sigmoid(i) * np.tanh(u) + c
        return {"h": sigmoid(o) * np.tanh(c), "c": c}

    return by_hand(s, node)


@pytest.mark.parametrize("arity", [2, 3])
def test_dgl_nary_cell(arity):
    rng = np.random.default_rng(4 + arity)
    sd = dgl_state_dict(rng, arity)
    model = TreeLSTM(hidden=H, embed=X, vocab=V, arity=arity, forget_bias="per_child", dtype="float64")
    load_dgl_treelstm(model, sd)
    trees = [random_tree(rng, n, arity) for n in (1, 3, 8)]
    assert_matches(model, trees, [dgl_by_hand(sd, t, child_sum=False) for t in trees])
    cell_only = {k[len("cell."):]: v for k, v in sd.items() if k.startswith("cell.")}
    again = TreeLSTM(hidden=H, embed=X, vocab=V, arity=arity, forget_bias="per_child", dtype="float64")
    load_dgl_treelstm(again, cell_only, embedding=sd["embedding.weight"])
    assert all(np.array_equal(model.params[k], again.params[k]) for k in model.params)


def test_dgl_child_sum_cell():
    rng = np.random.default_rng(7)
    sd = dgl_state_dict(rng, None)
    model = ChildSumTreeLSTM(hidden=H, embed=X, vocab=V, dtype="float64")
    load_dgl_treelstm(model, sd)
    assert not model.params["W_f"].any()
    trees = [random_dependency_tree(rng, n) for n in (1, 4, 12)]
    assert_matches(model, trees, [dgl_by_hand(sd, t, child_sum=True) for t in trees])


def test_dgl_refuses_a_model_of_the_other_cell_and_says_which_fits():
    rng = np.random.default_rng(8)
    with pytest.raises(ParamError, match=r"DGL's ChildSumTreeLSTMCell, for a ChildSumTreeLSTM"):
        load_dgl_treelstm(TreeLSTM(hidden=H, embed=X, vocab=V, forget_bias="per_child"),
                          dgl_state_dict(rng, None))
    with pytest.raises(ParamError, match=r"DGL's TreeLSTMCell of 2 children, for a "
                                         r"TreeLSTM\(arity=2, forget_bias='per_child'\)"):
        load_dgl_treelstm(ChildSumTreeLSTM(hidden=H, embed=X, vocab=V), dgl_state_dict(rng, 2))
    with pytest.raises(ParamError, match=r"build it with TreeLSTM\(\.\.\., forget_bias='per_child'\)"):
        load_dgl_treelstm(TreeLSTM(hidden=H, embed=X, vocab=V), dgl_state_dict(rng, 2))
    with pytest.raises(ParamError, match=r"loads into a cortex.models.TreeLSTM\(forget_bias="
                                         r"'per_child', leaf='gated', \.\.\.\) or a ChildSumTreeLSTM, "
                                         r"not a TreeGRU; for a TreeGRU use load_torch_treegru"):
        load_dgl_treelstm(TreeGRU(hidden=H, embed=X, vocab=V), dgl_state_dict(rng, 2))
    with pytest.raises(ParamError, match=r"unexpected keys \['W_f.weight'\]"):
        load_dgl_treelstm(ChildSumTreeLSTM(hidden=H, embed=X, vocab=V),
                          {**dgl_state_dict(rng, None, prefix=""), "W_f.weight": np.zeros((H, X))})


# --------------------------------------------------------------------------------------------
# TreeGRU (the layout of docs/models.md)
# --------------------------------------------------------------------------------------------


def treegru_state_dict(rng, n: int) -> dict[str, np.ndarray]:
    return fake(rng, {"embedding.weight": (V, X), "W_e.weight": (H, X), "W_e.bias": (H,),
                      "U_rz.weight": (2 * H, n * H), "U_rz.bias": (2 * H,),
                      "U_n.weight": (H, n * H), "U_n.bias": (H,)})


def treegru_by_hand(sd, s: Structure):
    def node(v, kids):
        if not kids:
            x = sd["embedding.weight"][s.words[v]]
            return {"h": np.tanh(sd["W_e.weight"] @ x + sd["W_e.bias"])}
        hs = [k["h"] for k in kids]
        r, z = np.split(sigmoid(sd["U_rz.weight"] @ np.concatenate(hs) + sd["U_rz.bias"]), 2)
        n = np.tanh(sd["U_n.weight"] @ np.concatenate([r * h for h in hs]) + sd["U_n.bias"])
        return {"h": (1 - z) * n + z * sum(hs) / len(hs)}

    return by_hand(s, node)


@pytest.mark.parametrize("arity", [2, 3])
def test_treegru(arity):
    rng = np.random.default_rng(9 + arity)
    sd = treegru_state_dict(rng, arity)
    model = TreeGRU(hidden=H, embed=X, vocab=V, arity=arity, dtype="float64")
    load_torch_treegru(model, sd)
    trees = [random_tree(rng, n, arity) for n in (1, 3, 7)]
    assert_matches(model, trees, [treegru_by_hand(sd, t) for t in trees])
    with pytest.raises(ParamError, match=r"'U_rz.weight' has shape \(10, \d+\); this model needs \(10, 20\)"):
        load_torch_treegru(TreeGRU(hidden=H, embed=X, vocab=V, arity=4), sd)


# --------------------------------------------------------------------------------------------
# Every importer checks the model class first
# --------------------------------------------------------------------------------------------


def test_an_importer_given_the_wrong_model_class_names_the_one_it_is_for():
    sd = {"ioux.weight": np.zeros((3 * H, X)), "iouh.weight": np.zeros((3 * H, H)),
          "fx.weight": np.zeros((H, X)), "fh.weight": np.zeros((H, H))}
    with pytest.raises(ParamError) as info:
        load_torch_childsum(TreeLSTM(hidden=H, embed=X, vocab=V), sd)
    assert str(info.value) == (
        "load_torch_childsum loads into a cortex.models.ChildSumTreeLSTM, not a TreeLSTM; for a "
        "TreeLSTM use load_torch_binary_treelstm (Tai et al.'s leaf_module/composer) or "
        "load_dgl_treelstm (DGL's TreeLSTMCell: W_iou, U_iou, b_iou, U_f)")
    with pytest.raises(ParamError, match=r"load_torch_treegru loads into a cortex.models.TreeGRU, "
                                         r"not a ChildSumTreeLSTM; for a ChildSumTreeLSTM use "
                                         r"load_torch_childsum"):
        load_torch_treegru(ChildSumTreeLSTM(hidden=H, embed=X, vocab=V), {})
    with pytest.raises(ParamError, match=r"pass embedding="):
        load_torch_childsum(ChildSumTreeLSTM(hidden=H, embed=X, vocab=V), sd)


def test_the_variants_compile_and_agree_with_the_reference():
    """The imported variants (linear leaf, per-child forget biases) through the whole pipeline."""
    rng = np.random.default_rng(12)
    model = TreeLSTM(hidden=H, embed=X, vocab=V, leaf="linear", forget_bias="per_child", seed=3)
    load_torch_binary_treelstm(model, binary_state_dict(rng))
    llvm = get_registry().get("llvm")
    targets = ["numpy"] + (["llvm"] if llvm.enabled() and llvm.runnable() else [])
    trees = [((1, 2), (3, (4, 5))), 7, (((0, 1), 2), 3)]
    want = None
    for target in targets:
        roots = cortex.compile(model, target=target, dtype="float64")(trees).root("h")
        want = roots if want is None else want
        np.testing.assert_allclose(roots, want, rtol=1e-10, atol=1e-12)
    structures = [Structure([[], [], [0, 1]], words=[1, 2, 0])]
    batch, ids = make_batch(structures)
    ref = evaluate(model.trace(), model.params, batch)["h"][ids[0][2]]
    got = cortex.compile(model, target="numpy", dtype="float64")([(1, 2)]).root("h")[0]
    np.testing.assert_allclose(got, ref, rtol=1e-10)


# --------------------------------------------------------------------------------------------
# The same layouts as real PyTorch modules (where torch is installed)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0 "
                                               "(tox -e torch); the NumPy layouts above still ran")


def _torch_tree(torch, s: Structure, node):
    states = {}

    def visit(v):
        for c in s.children[v]:
            if c not in states:
                visit(c)
        states[v] = node(v, [states[c] for c in s.children[v]])

    with torch.no_grad():
        visit(s.root)
    return {v: {k: t.numpy().astype(np.float64).reshape(-1) for k, t in st.items()}
            for v, st in states.items()}


def test_pytorch_binary_treelstm_module(torch):
    nn = torch.nn
    torch.manual_seed(0)

    class BinaryTreeLeafModule(nn.Module):
        def __init__(self, in_dim, mem_dim):
            super().__init__()
            self.cx, self.ox = nn.Linear(in_dim, mem_dim), nn.Linear(in_dim, mem_dim)

        def forward(self, x):
            c = self.cx(x)
            return c, torch.sigmoid(self.ox(x)) * torch.tanh(c)

    class BinaryTreeComposer(nn.Module):
        def __init__(self, mem_dim):
            super().__init__()
            for name in COMPOSER:
                setattr(self, name, nn.Linear(mem_dim, mem_dim))

        def forward(self, lc, lh, rc, rh):
            i = torch.sigmoid(self.ilh(lh) + self.irh(rh))
            lf = torch.sigmoid(self.lflh(lh) + self.lfrh(rh))
            rf = torch.sigmoid(self.rflh(lh) + self.rfrh(rh))
            o = torch.sigmoid(self.olh(lh) + self.orh(rh))
            c = i * torch.tanh(self.ulh(lh) + self.urh(rh)) + lf * lc + rf * rc
            return c, o * torch.tanh(c)

    class BinaryTreeLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, X)
            self.leaf_module, self.composer = BinaryTreeLeafModule(X, H), BinaryTreeComposer(H)

    module = BinaryTreeLSTM()
    model = TreeLSTM(hidden=H, embed=X, vocab=V, leaf="linear", forget_bias="per_child")
    load_torch_binary_treelstm(model, module.state_dict())
    tree = random_tree(np.random.default_rng(13), 7, 2)

    def node(v, kids):
        if not kids:
            c, h = module.leaf_module(module.emb(torch.tensor(tree.words[v])))
        else:
            c, h = module.composer(kids[0]["c"], kids[0]["h"], kids[1]["c"], kids[1]["h"])
        return {"c": c, "h": h}

    assert_matches(model, [tree], [_torch_tree(torch, tree, node)], tol=1e-5)


def test_pytorch_dgl_cells(torch):
    """DGL's cells with DGL's parameter names, run per node with the tensor code of their
    reduce_func and apply_node_func (DGL itself is not needed: the importer reads only the
    state dict; the mailbox is the node's children in order)."""
    nn = torch.nn
    torch.manual_seed(1)

    class Cell(nn.Module):
        def __init__(self, n):
            super().__init__()
            width = H * (n or 1)
            self.W_iou = nn.Linear(X, 3 * H, bias=False)
            self.U_iou = nn.Linear(width, 3 * H, bias=False)
            self.b_iou = nn.Parameter(torch.randn(1, 3 * H))
            self.U_f = nn.Linear(width, width)

    for n in (2, None):
        module = nn.Module()
        module.embedding, module.cell = nn.Embedding(V, X), Cell(n)
        module.linear = nn.Linear(H, 3)
        cell = module.cell
        model = (TreeLSTM(hidden=H, embed=X, vocab=V, forget_bias="per_child") if n
                 else ChildSumTreeLSTM(hidden=H, embed=X, vocab=V))
        load_dgl_treelstm(model, module.state_dict())
        rng = np.random.default_rng(14)
        tree = random_tree(rng, 6, 2) if n else random_dependency_tree(rng, 9)

        def node(v, kids):
            x = module.embedding(torch.tensor([tree.words[v]]))
            if not kids:
                iou, c = cell.W_iou(x), torch.zeros(1, H)
            else:
                mh = torch.stack([k["h"] for k in kids], 1)  # the mailbox: [1, children, H]
                mc = torch.stack([k["c"] for k in kids], 1)
                if n:  # TreeLSTMCell.reduce_func (no word at internal nodes: mask 0)
                    h_cat = mh.view(mh.size(0), -1)
                    f = torch.sigmoid(cell.U_f(h_cat)).view(*mh.size())
                    iou = cell.U_iou(h_cat)
                else:  # ChildSumTreeLSTMCell.reduce_func (a word at every node: mask 1)
                    f = torch.sigmoid(cell.U_f(mh))
                    iou = cell.W_iou(x) + cell.U_iou(torch.sum(mh, 1))
                c = torch.sum(f * mc, 1)
            i, o, u = torch.chunk(iou + cell.b_iou, 3, 1)  # apply_node_func
            c = torch.sigmoid(i) * torch.tanh(u) + c
            return {"h": torch.sigmoid(o) * torch.tanh(c), "c": c}

        assert_matches(model, [tree], [_torch_tree(torch, tree, node)], tol=1e-5)


def test_pytorch_treegru_module(torch):
    """The TreeGRU layout of docs/models.md as a torch module."""
    nn = torch.nn
    torch.manual_seed(2)

    class TorchTreeGRU(nn.Module):
        def __init__(self, vocab, x_size, h_size, arity=2):
            super().__init__()
            self.embedding = nn.Embedding(vocab, x_size)
            self.W_e = nn.Linear(x_size, h_size)
            self.U_rz = nn.Linear(arity * h_size, 2 * h_size)
            self.U_n = nn.Linear(arity * h_size, h_size)

        def node(self, word, hs):
            if not hs:
                return torch.tanh(self.W_e(self.embedding(torch.tensor(word))))
            r, z = torch.sigmoid(self.U_rz(torch.cat(hs, -1))).chunk(2, -1)
            n = torch.tanh(self.U_n(torch.cat([r * h for h in hs], -1)))
            return (1 - z) * n + z * sum(hs) / len(hs)

    module = TorchTreeGRU(V, X, H, arity=3)
    model = TreeGRU(hidden=H, embed=X, vocab=V, arity=3)
    load_torch_treegru(model, module.state_dict())
    tree = random_tree(np.random.default_rng(15), 7, 3)
    expected = _torch_tree(torch, tree, lambda v, kids: {
        "h": module.node(tree.words[v], [k["h"] for k in kids])})
    assert_matches(model, [tree], [expected], tol=1e-5)


def test_an_imported_model_is_kept_in_one_file(tmp_path):
    """Import once, keep it: the variant keywords and the imported params survive save/load."""
    rng = np.random.default_rng(16)
    model = TreeLSTM(hidden=H, embed=X, vocab=V, arity=2, forget_bias="per_child")
    load_dgl_treelstm(model, dgl_state_dict(rng, 2))
    model.save(tmp_path / "imported.cortex")
    kept = TreeLSTM.load(tmp_path / "imported.cortex")
    assert (kept.forget_bias, kept.leaf_form) == ("per_child", "gated")
    assert all(np.array_equal(model.params[k], kept.params[k]) for k in model.params)
    trees = [((1, 2), (3, 4)), 5]
    np.testing.assert_array_equal(cortex.compile(kept, target="numpy")(trees).root("h"),
                                  cortex.compile(model, target="numpy")(trees).root("h"))
