"""Reader for PTB/SST s-expressions: ``(3 (2 It) (4 (2 's) (3 fine)))``.

Pipeline position: ``linearize`` calls :func:`parse_sexpr` for ``str`` / ``SExpr`` inputs and
``cortex.data.read_ptb`` for each line of a file; the result is a :class:`Part`.

Grammar (one tree per string; whitespace separates tokens; no token contains a bracket)::

    tree  := "(" [label] item+ ")" | word
    item  := tree

* ``(label word)`` -- a bracket holding exactly one bare word -- is a leaf with that label
  and word (SST / PTB preterminals); the word is not a node of its own. ``(word)`` is an
  unlabeled leaf.
* Any other bracket is an internal node; bare words among several items are unlabeled leaves.
* The first bare token after ``(`` is the label when more items follow; integer labels are
  kept as is, other labels (``NP``) go through ``label_vocab`` (required for them).
* A lone word (no brackets) is a one-node tree.

Malformed text (empty input, ``()``, a label without children, unbalanced brackets, text after
the root) raises :class:`ParseError` naming the node path and the character offset. One
iterative pass: nesting depth is unlimited.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .errors import ParseError
from .parts import Part, PathKeys, path_of, tree_heights
from .tokens import resolve_words

_TOKEN = re.compile(r"[()]|[^\s()]+")
#: What a str input is, and what to pass instead (several trees, Python source).
AFTER_END_HINT = ("; a str input is ONE PTB/SST s-expression such as '(3 (2 It) (4 works))'. "
                  "For several trees pass a list of strings; for Python source pass "
                  "cortex.data.ast_tree(source) (or an ast tree)")
# Fast path: whole SST leaves "(2 It)" and labelled openings "(3 (" as single matches.
_FAST = re.compile(r"\(\s*([^\s()]+)\s+([^\s()]+)\s*\)"  # (label word)
                   r"|\(\s*([^\s()]+)(?=\s*\()"  # (label followed by a child bracket
                   r"|(\))|([()]|[^\s()]+)")  # a close, anything else


def _offset(text: str, k: int) -> int:
    """Character offset of token ``k`` (error path only)."""
    for j, m in enumerate(_TOKEN.finditer(text)):
        if j == k:
            return m.start()
    return len(text)


def _label_id(tok: str, label_vocab: Any) -> int:
    try:
        return int(tok)
    except ValueError:
        if label_vocab is None:
            raise KeyError(tok) from None
        return int(label_vocab[tok])


def _fast(text: str) -> tuple[list[int], list[Any], list[Any]] | None:
    """Parse the common SST shape (every bracket labelled; leaves ``(label word)``) in one
    regex pass with few Python steps per node. Returns None for anything else (the general
    parser below then handles it, including every error message)."""
    parent: list[int] = []
    words: list[Any] = []
    labels: list[Any] = []
    stack: list[int] = []
    top = -1
    for lab, word, lab2, close, other in _FAST.findall(text):
        if word:
            if top < 0 and parent:
                return None
            parent.append(top)
            words.append(word)
            labels.append(lab)
        elif lab2:  # "(label (": never empty, the lookahead saw a child
            if top < 0 and parent:
                return None
            parent.append(top)
            top = len(words)
            words.append(-1)
            labels.append(lab2)
            stack.append(top)
        elif close and stack:
            stack.pop()
            top = stack[-1] if stack else -1
        else:
            return None
    if stack or not parent:
        return None
    return parent, words, labels


def parse_sexpr(text: str, vocab: Any, label_vocab: Any, index: int) -> Part:
    if not isinstance(text, str):
        raise ParseError(f"expected s-expression text, got {type(text).__name__}",
                         input_index=index)
    fast = _fast(text)
    if fast is not None:
        parent, words, raw = fast
        try:
            labels = [int(x) for x in raw]
        except ValueError:
            labels = None
        except OverflowError:  # pragma: no cover - int() of a str never overflows
            labels = None
        if labels is not None:
            def where(v: int) -> str:
                return path_of(parent, None, v)

            return Part(len(parent), np.array(parent, dtype=np.int64), None,
                        resolve_words(words, vocab, where, index), None,
                        np.array(labels, dtype=np.int64), PathKeys(parent), trusted=True,
                        height=tree_heights(parent))
    return _parse_general(text, vocab, label_vocab, index)


def _parse_general(text: str, vocab: Any, label_vocab: Any, index: int) -> Part:
    if not isinstance(text, str):
        raise ParseError(f"expected s-expression text, got {type(text).__name__}",
                         input_index=index)
    toks = _TOKEN.findall(text)
    parent: list[int] = []
    pos: list[int] = []
    words: list[Any] = []
    labels: list[int] = []
    nkids: list[int] = []
    bare: list[bool] = []  # node was written as a bare word
    stack: list[int] = []
    has_label = False

    def fail(msg: str, k: int, v: int | None = None, hint: str = "") -> ParseError:
        path = path_of(parent, pos, v) if v is not None and v < len(parent) else None
        return ParseError(f"{msg} (at character {_offset(text, k)}){hint}", input_index=index,
                          path=path)

    def new_node(par: int) -> int:
        v = len(parent)
        parent.append(par)
        if par >= 0:
            pos.append(nkids[par])
            nkids[par] += 1
        else:
            pos.append(0)
        words.append(-1)
        labels.append(-1)
        nkids.append(0)
        bare.append(False)
        return v

    if not toks:
        raise ParseError("empty s-expression", input_index=index)
    ntok = len(toks)
    k = 0
    while k < ntok:
        t = toks[k]
        if t == "(":
            if not stack and parent:
                raise fail("text after the end of the tree", k, hint=AFTER_END_HINT)
            v = new_node(stack[-1] if stack else -1)
            stack.append(v)
            k += 1
            if k < ntok and toks[k] != "(" and toks[k] != ")" and k + 1 < ntok \
                    and toks[k + 1] != ")":
                # first bare token with more items after it: the label
                try:
                    labels[v] = _label_id(toks[k], label_vocab)
                except KeyError:
                    raise fail(f"label {toks[k]!r} is not an integer; pass label_vocab= "
                               "for non-numeric labels", k, v) from None
                except OverflowError:
                    raise fail(f"label {toks[k]!r} is too large", k, v) from None
                has_label = True
                k += 1
            continue
        if t == ")":
            if not stack:
                raise fail("unbalanced ')'", k)
            v = stack.pop()
            kids = nkids[v]
            if kids == 0:
                raise fail("empty node: '(' needs a label and at least one child", k, v)
            if kids == 1 and bare[-1] and parent[-1] == v:
                # (label word): the bracket itself is the leaf
                words[v] = words.pop()
                parent.pop(), pos.pop(), labels.pop(), nkids.pop(), bare.pop()
                nkids[v] = 0
            k += 1
            continue
        # a bare word
        if not stack:
            if parent:
                raise fail("text after the end of the tree", k, hint=AFTER_END_HINT)
            v = new_node(-1)
            bare[v] = True
            words[v] = t
            k += 1
            continue
        v = new_node(stack[-1])
        bare[v] = True
        words[v] = t
        k += 1
    if stack:
        raise fail("unbalanced '(': missing ')'", ntok, stack[-1])

    def where(v: int) -> str:
        return path_of(parent, pos, v)

    word_arr = resolve_words(words, vocab, where, index)
    label_arr = np.array(labels, dtype=np.int64) if has_label else None
    return Part(len(parent), np.array(parent, dtype=np.int64), None, word_arr, None, label_arr,
                PathKeys(parent, pos), trusted=True, height=tree_heights(parent))

