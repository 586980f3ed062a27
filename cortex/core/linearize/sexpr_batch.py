"""Vectorized reader for a batch of SST-shaped s-expressions (the common case, fast).

Pipeline position: ``linearize`` hands the s-expression strings of a batch (those not already
cached) to :func:`parse_sst_batch` first; when it declines (returns None) every text goes
through ``sexpr`` one by one, which also produces every error message. Accepted shape: ASCII
text, every bracket labelled, leaves ``(label word)``, internal brackets holding only brackets
-- exactly SST. Labels must be integers.

How: the joined texts become a byte array; NumPy classifies bytes into brackets and tokens,
checks the shape, and finds each node's parent as the nearest preceding opening bracket at its
depth (a searchsorted over openings sorted by (depth, position)). Python only slices the words
out for the vocabulary lookup.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .parts import Part, PathKeys
from .tokens import resolve_words

_OPEN, _CLOSE, _TOKEN = 0, 1, 2


def _shift(a: np.ndarray, k: int, fill: int) -> np.ndarray:
    """``a[i + k]`` with ``fill`` past the end."""
    out = np.full(len(a), fill, a.dtype)
    if k < len(a):
        out[: len(a) - k] = a[k:]
    return out


def parse_sst_batch(texts: list[str], vocab: Any, index: int = 0) -> list[Part] | None:
    """Parts for all ``texts``, or None if any text is not plain SST (caller falls back)."""
    joined = "\n".join(texts)
    if not texts or not joined or not joined.isascii():
        return None
    b = np.frombuffer(joined.encode("ascii"), np.uint8)
    is_op = b == 40
    is_cl = b == 41
    is_ch = ~(is_op | is_cl | (b == 32) | ((b >= 9) & (b <= 13)))
    prev_ch = np.empty_like(is_ch)
    prev_ch[0] = False
    prev_ch[1:] = is_ch[:-1]
    tok_start = is_ch & ~prev_ch
    ev = np.flatnonzero(is_op | is_cl | tok_start)
    if not len(ev):
        return None
    kind = np.where(is_op[ev], _OPEN, np.where(is_cl[ev], _CLOSE, _TOKEN)).astype(np.int8)
    opens = np.flatnonzero(kind == _OPEN)
    k1, k2, k3 = _shift(kind, 1, -1), _shift(kind, 2, -1), _shift(kind, 3, -1)
    if (k1[opens] != _TOKEN).any():
        return None  # an unlabelled bracket
    leaf = (k2[opens] == _TOKEN) & (k3[opens] == _CLOSE)
    if not ((k2[opens] == _OPEN) | leaf).all():
        return None  # a label followed by something else than "(" or "word )"
    n = len(opens)
    n_leaf = int(np.count_nonzero(leaf))
    if int(np.count_nonzero(kind == _TOKEN)) != n + n_leaf:
        return None  # stray words
    # structure events: internal opens (+1) and the closes of internal nodes (-1)
    leaf_close = np.zeros(len(ev), bool)
    leaf_close[opens[leaf] + 3] = True
    keep = (kind == _OPEN) | ((kind == _CLOSE) & ~leaf_close)
    code = kind[keep]
    is_node = code == _OPEN
    node_leaf = np.zeros(n, bool)
    node_leaf[:] = leaf
    step = np.where(is_node, 1, -1)
    step[np.flatnonzero(is_node)[leaf]] = 0  # a leaf opens and closes itself
    depth = np.cumsum(step)  # depth after each event
    ntok = len(code)
    # every text must be one balanced tree: depth returns to 0 exactly at each text's end
    pos = ev[keep]
    text_end = np.cumsum([len(t) + 1 for t in texts]) - 1
    last = np.searchsorted(pos, text_end) - 1
    zero = np.flatnonzero(depth == 0)
    if depth.min() < 0 or len(zero) != len(texts) or not np.array_equal(zero, last):
        return None
    node_ev = np.flatnonzero(is_node)
    node_depth = depth[node_ev] - (step[node_ev] == 1)
    inner = node_ev[step[node_ev] == 1]
    if len(inner):
        by_depth = inner[np.argsort(depth[inner], kind="stable")]
        key = depth[by_depth] * ntok + by_depth
        slot = np.searchsorted(key, node_depth * ntok + node_ev) - 1
        # node number of an event = its rank among node events
        parent = np.where(node_depth > 0,
                          np.searchsorted(node_ev, by_depth[np.maximum(slot, 0)]), -1)
    else:  # only one-leaf trees
        parent = np.full(n, -1, np.int64)
    # labels: the token after each "("; words: the second token of each leaf
    tok_pos = ev[opens + 1]
    tok_len = np.flatnonzero(is_ch & ~np.append(is_ch[1:], False)) + 1
    starts = np.flatnonzero(tok_start)
    length = tok_len - starts  # per token, in order
    tok_ev = np.flatnonzero(kind == _TOKEN)  # token number of an event = its rank here
    lab_len = length[np.searchsorted(tok_ev, opens + 1)]
    if (lab_len == 1).all() and ((b[tok_pos] >= 48) & (b[tok_pos] <= 57)).all():
        labels = b[tok_pos].astype(np.int64) - 48
    else:
        try:
            labels = np.array([int(joined[s:s + k]) for s, k in
                               zip(tok_pos.tolist(), lab_len.tolist())], dtype=np.int64)
        except (ValueError, OverflowError):
            return None  # non-numeric labels: the general parser (label_vocab) handles them
    word_ev = opens[leaf] + 2
    ws = ev[word_ev].tolist()
    wl = length[np.searchsorted(tok_ev, word_ev)].tolist()
    words = [joined[s:s + k] for s, k in zip(ws, wl)]
    words_all = np.full(n, -1, np.int64)
    ids = resolve_words(words, vocab, lambda i: None, index)
    if ids is not None:
        words_all[leaf] = ids
    parts = []
    start = 0
    for stop in (np.searchsorted(node_ev, zero, side="right")).tolist():
        par = parent[start:stop] - start
        par[0] = -1
        parts.append(Part(stop - start, par, None, words_all[start:stop], None,
                          labels[start:stop], PathKeys(par), trusted=True))
        start = stop
    return parts
