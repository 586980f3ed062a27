"""PyTorch import: SeqLSTM/SeqGRU from nn.LSTM/nn.GRU, ChildSumTreeLSTM from the common
ioux/iouh/fx/fh module, compared with PyTorch's own outputs (float32, 1e-5).

Runs only where torch is installed (``pip install torch==2.13.0``; the tox env ``torch`` does it).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0 (tox -e torch)")

from cortex.core.frontend.model_errors import ParamError  # noqa: E402
from cortex.core.frontend.params import load_torch_childsum, load_torch_gru, load_torch_lstm  # noqa: E402
from cortex.core.passes import run_passes  # noqa: E402
from cortex.core.frontend.reference import evaluate  # noqa: E402
from cortex.models import ChildSumTreeLSTM, SeqGRU, SeqLSTM  # noqa: E402
from zoo_structures import Structure, make_batch  # noqa: E402

torch.manual_seed(0)


def sequences(lengths, features, rng):
    return [Structure([[]] + [[t] for t in range(n - 1)], features=rng.normal(size=(n, features)).astype(np.float32))
            for n in lengths]


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_sequence_models_reproduce_pytorch(kind):
    F, H = 5, 7
    rng = np.random.default_rng(0)
    module = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(F, H)
    model = (SeqLSTM if kind == "lstm" else SeqGRU)(hidden=H, features=F)
    (load_torch_lstm if kind == "lstm" else load_torch_gru)(model, module.state_dict())
    structs = sequences([9, 1, 4, 9], F, rng)
    batch, ids = make_batch(structs)
    graph = model.trace()
    for g in (graph, run_passes(graph)):
        out = evaluate(g, model.params, batch)
        for b, s in enumerate(structs):
            with torch.no_grad():
                y, _ = module(torch.from_numpy(s.features)[:, None, :])
            ours = np.stack([out["h"][ids[b][t]] for t in range(len(s.children))])
            np.testing.assert_allclose(ours, y[:, 0, :].numpy(), rtol=1e-5, atol=1e-5)


def test_lstm_with_embedding_and_gate_order_matters():
    V, E, H = 9, 4, 3
    emb, lstm = torch.nn.Embedding(V, E), torch.nn.LSTM(E, H)
    model = SeqLSTM(hidden=H, vocab=V, embed=E)
    load_torch_lstm(model, lstm.state_dict(), embedding=emb.weight)
    words = [3, 1, 4, 1, 5]
    batch, ids = make_batch([Structure([[]] + [[t] for t in range(4)], words=words)])
    out = evaluate(model.trace(), model.params, batch)
    with torch.no_grad():
        y, (h, c) = lstm(emb(torch.tensor(words))[:, None, :])
    np.testing.assert_allclose(out["h"][ids[0][4]], h[0, 0].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["c"][ids[0][4]], c[0, 0].numpy(), rtol=1e-5, atol=1e-5)
    # Swapping two gates' blocks (ignoring PyTorch's order) must break the agreement.
    sd = {k: v.clone() for k, v in lstm.state_dict().items()}
    for k in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0"):
        sd[k] = torch.cat([sd[k][H:2 * H], sd[k][:H], sd[k][2 * H:]])
    load_torch_lstm(model, sd, embedding=emb.weight)
    wrong = evaluate(model.trace(), model.params, batch)["h"][ids[0][4]]
    assert not np.allclose(wrong, h[0, 0].numpy(), atol=1e-3)


def test_unsupported_modules_are_rejected():
    model = SeqGRU(hidden=3, features=2)
    with pytest.raises(ParamError, match="1-layer, unidirectional"):
        load_torch_gru(model, torch.nn.GRU(2, 3, num_layers=2).state_dict())
    with pytest.raises(ParamError, match="don't fit"):
        load_torch_gru(model, torch.nn.GRU(4, 3).state_dict())
    with pytest.raises(ParamError, match="embedding="):
        load_torch_lstm(SeqLSTM(hidden=3, vocab=5, embed=2), torch.nn.LSTM(2, 3).state_dict())


class TorchChildSumTreeLSTM(torch.nn.Module):
    """The usual PyTorch child-sum Tree-LSTM layout (written here for the test)."""

    def __init__(self, vocab, in_dim, mem_dim):
        super().__init__()
        self.mem_dim = mem_dim
        self.emb = torch.nn.Embedding(vocab, in_dim)
        self.ioux = torch.nn.Linear(in_dim, 3 * mem_dim)
        self.iouh = torch.nn.Linear(mem_dim, 3 * mem_dim)
        self.fx = torch.nn.Linear(in_dim, mem_dim)
        self.fh = torch.nn.Linear(mem_dim, mem_dim)

    def node_forward(self, x, child_c, child_h):
        child_h_sum = child_h.sum(dim=0, keepdim=True)
        iou = self.ioux(x) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, self.mem_dim, dim=1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
        f = torch.sigmoid(self.fh(child_h) + self.fx(x).repeat(len(child_h), 1))
        c = i * u + (f * child_c).sum(dim=0, keepdim=True)
        return c, o * torch.tanh(c)

    def forward(self, children, words):
        states = {}

        def visit(v):
            for k in children[v]:
                visit(k)
            if children[v]:
                cc = torch.cat([states[k][0] for k in children[v]])
                ch = torch.cat([states[k][1] for k in children[v]])
            else:
                cc = ch = torch.zeros(1, self.mem_dim)
            states[v] = self.node_forward(self.emb(torch.tensor([words[v]])), cc, ch)

        visit(len(children) - 1)
        return states


def test_childsum_treelstm_from_pytorch_module():
    V, D, H = 10, 4, 5
    module = TorchChildSumTreeLSTM(V, D, H)
    model = ChildSumTreeLSTM(hidden=H, embed=D, vocab=V)
    load_torch_childsum(model, module.state_dict())
    children = [[], [], [], [0, 1], [], [3, 2, 4]]
    words = [1, 7, 2, 5, 9, 0]
    batch, ids = make_batch([Structure(children, words=words)])
    with torch.no_grad():
        expected = module(children, words)
    for g in (model.trace(), run_passes(model.trace())):
        out = evaluate(g, model.params, batch)
        for v, (c, h) in expected.items():
            np.testing.assert_allclose(out["h"][ids[0][v]], h[0].numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out["c"][ids[0][v]], c[0].numpy(), rtol=1e-5, atol=1e-5)
