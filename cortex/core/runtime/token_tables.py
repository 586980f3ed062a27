"""Token tables, filled row by row on first use instead of at compile time.

Pipeline position: between binding the params (:mod:`cortex.core.frontend.params`, in the pipeline's
worker) and the executable's calls (:mod:`cortex.core.runtime.executable`). Only for a runtime
with ``tables_on_use`` (``cortex.core.plugin.backend.Runtime``): a host runtime, whose program
reads the param arrays in place, or a device runtime that copies the rows each fill wrote to its
buffers before the next launch (``Runtime.refresh_rows``: OpenCL). Other devices get the tables
whole at compile time.

A *token table* is a derived param whose row ``t`` depends on token id ``t`` alone:

* ``embed_linear`` (hoisting, ``cortex.core.passes.hoist``): ``E' = E @ W.T (+ b)``, a row per
  row of the embedding ``E`` (or of another token table);
* ``leaf_state`` (the level-1 case, ``cortex.core.passes.preterminal``): the leaf case's states
  of every token.

Made whole, they are the bulk of a compile's work for a big vocabulary (TreeLSTM, vocab 20000,
h256, level-1 tables: 26 GFLOP of GEMM, the leaf case over 20000 tokens and 276 MiB of pages,
about one core-second) although a call reads only the rows of the tokens in its batch. So the
compile allocates them as zero pages (:func:`~cortex.core.runtime.hostmem.sparse_zeros`: a page not
written costs no memory), and each call first
computes the rows of the tokens its batch holds that no earlier call computed
(:meth:`TokenTables.ensure`: one gather over the batch's token ids when nothing is missing). A
row is computed with the same recipe as the whole table, on the selected rows of its sources,
in the compile dtype; the result agrees with the whole table's row within rounding (BLAS may
block a few rows differently from 20000). ``Executable.fill_tables()`` computes every row
that is still missing, for a server that wants no first-use work in its calls.

The fill reads a snapshot of the params (copies, taken at compile time), so a model changed
after ``cortex.compile`` does not change an executable, whichever rows it has computed.

A fill of many rows (a first call on a large corpus, or ``fill_tables``) runs in chunks of
:data:`CHUNK_ROWS` token ids; when the first chunk shows that the whole fill will take longer
than :data:`PROGRESS_AFTER_S`, a progress bar (:mod:`cortex.core.runtime.progress`) reports the rest.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Collection, Mapping

import numpy as np

from cortex.core.frontend.graph import RecursiveGraph
from cortex.core.frontend.params import bind_exact, compute_derived, leaf_states_of
from cortex.core.runtime.hostmem import sparse_zeros
from cortex.core.runtime.progress import bar as progress_bar

#: The recipes whose row ``t`` is a function of token ``t`` (given their other args whole).
ROW_RECIPES = ("embed_linear", "leaf_state")
#: Token ids per step of a fill, and how long a fill must promise to last to get a progress bar.
CHUNK_ROWS = 4096
PROGRESS_AFTER_S = 2.0


def token_table_names(graph: RecursiveGraph) -> tuple[str, ...]:
    """The derived params of ``graph`` that are token tables, in ``graph.derived`` order (each
    after the tables it reads); ``()`` when the graph has no word input, or when a derived
    param that is not a token table reads one (it would need the whole table)."""
    words = [i for i in graph.node_inputs if i.kind == "word"]
    if len(words) != 1:
        return ()
    vocab = int(words[0].vocab)
    names: list[str] = []
    for d in graph.derived:
        row_wise = d.recipe in ROW_RECIPES and d.shape[:1] == (vocab,)
        if row_wise and d.recipe == "embed_linear":
            row_wise = not any(a in names for a in d.args[1:])  # only the first arg is by row
        if row_wise:
            names.append(d.name)
        elif any(a in names for a in d.args):
            return ()
    return tuple(names)


class TokenTables:
    """The token tables of one executable and which of their rows are computed.

    Made by :func:`bind_deferred`; the executable hands it the arrays its program reads
    (:meth:`attach`) and calls :meth:`ensure` with each batch's token ids before a launch.
    Not thread-safe by itself: the executable calls it under its call lock."""

    def __init__(self, graph: RecursiveGraph, names: tuple[str, ...],
                 sources: Mapping[str, np.ndarray], dtype: np.dtype,
                 own: Mapping[str, np.ndarray] | None = None) -> None:
        """``sources``: the other params the recipes read; ``own``: storage for the tables
        that no program buffer holds (read only by the other tables' recipes)."""
        self.graph = graph
        self.names = names
        self.dtype = np.dtype(dtype)
        self._sources = dict(sources)  # the other params a row's recipe reads, in dtype
        self._derived = {d.name: d for d in graph.derived if d.name in names}
        self.vocab = int(next(i.vocab for i in graph.node_inputs if i.kind == "word"))
        # one flag per token id and one more for -1 (no token), set, so the batch's ids index it
        self._done = np.zeros(self.vocab + 1, dtype=bool)
        self._done[-1] = True
        self.complete = False
        self.arrays: dict[str, np.ndarray] = dict(own or {})
        self.rows_computed = 0  # over the executable's life (a diagnostic, and for tests)
        self._on_rows: Callable[[np.ndarray], Any] | None = None

    def round_sources(self, names: Collection[str], storage: str) -> None:
        """Read the sources in ``names`` as a program that stores them as ``storage`` does
        (``loopir.storage.round_to``: ``bfloat16`` rounds each value), before any row is
        computed: a table row that multiplies by such a matrix then multiplies by the values
        the program's own GEMVs read, so every schedule computes the model with rounded
        weights (``weights="bfloat16"``), tables or not."""
        from cortex.core.loopir.storage import round_to

        if self.rows_computed:
            raise RuntimeError("internal error: token-table sources rounded after rows were computed")
        for name in sorted(set(names) & set(self._sources)):
            self._sources[name] = round_to(np.asarray(self._sources[name], np.float32), storage).astype(self.dtype)

    def attach(self, arrays: Mapping[str, np.ndarray], on_rows: Callable[[np.ndarray], Any] | None = None) -> None:
        """The arrays (by table name) the program reads: C-contiguous host arrays, row-major (a
        table none of them holds gets zero pages of its own: one that only other tables' recipes
        read, such as a ``leaf_state`` table under ``leaf_tables=False``);
        ``on_rows(rows)`` is called after each fill with the rows it wrote (sorted, distinct),
        e.g. to copy them to a device (``Runtime.refresh_rows``)."""
        self._on_rows = on_rows
        for name in self.names:
            if name not in arrays:
                if name not in self.arrays:  # bound, but no buffer of this schedule's program
                    self.arrays[name] = sparse_zeros(self._derived[name].shape, self.dtype)
                continue  # our own storage
            a = arrays[name]
            if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or a.shape != self._derived[name].shape:
                raise TypeError(f"token table {name!r} must be a C-contiguous host array of shape "
                                f"{self._derived[name].shape}, not {type(a).__name__}")
            self.arrays[name] = a

    @property
    def rows_done(self) -> int:
        """How many token ids have their rows computed."""
        return int(np.count_nonzero(self._done[:-1]))

    def ensure(self, word_ids: np.ndarray) -> int:
        """Compute the rows of the ids in ``word_ids`` (-1: none) not computed yet; returns
        how many ids that was. An id outside ``[0, vocab)`` is skipped: ``bind_batch`` checked
        every id the program reads, and a node whose token nothing reads may carry any."""
        if self.complete:
            return 0
        try:
            if self._done[word_ids].all():
                return 0
        except IndexError:  # an id >= vocab on a node that reads none
            word_ids = word_ids[(word_ids >= 0) & (word_ids < self.vocab)]
        need = np.zeros_like(self._done)  # the distinct ids, sorted (np.unique imports numpy.ma)
        need[word_ids] = True
        need &= ~self._done  # -1 lands on the extra flag, which is set
        rows = np.flatnonzero(need)
        self._fill(rows)
        return len(rows)

    def fill_all(self, progress: bool | None = None) -> int:
        """Compute every row not computed yet; returns how many token ids that was."""
        if self.complete:
            return 0
        rows = np.flatnonzero(~self._done[:-1])
        if len(rows):
            self._fill(rows, progress)
        self.complete = True
        return len(rows)

    def _fill(self, rows: np.ndarray, progress: bool | None = None) -> None:
        """The ``rows`` of every table, :data:`CHUNK_ROWS` token ids at a time, with a
        progress bar when the fill promises to be long (``progress``: force it on or off)."""
        if not self.arrays:
            raise RuntimeError("internal error: token tables used before attach()")
        chunks = [rows[i:i + CHUNK_ROWS] for i in range(0, len(rows), CHUNK_ROWS)]
        start = time.perf_counter()
        bar = None
        for i, chunk in enumerate(chunks):
            self._fill_rows(chunk)
            if bar is None and i == 0 and len(chunks) > 1 and progress is not False:
                guess = (time.perf_counter() - start) * len(chunks)
                if progress or guess > PROGRESS_AFTER_S:
                    bar = progress_bar(len(rows), "cortex: token tables", "tokens", progress)
                    bar.update(len(chunk))
            elif bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()

    def _fill_rows(self, rows: np.ndarray) -> None:
        """Each table's ``rows``, in dependency order: a table's recipe reads the rows of the
        tables before it, which this fill or an earlier one has computed."""
        states: dict[str, np.ndarray] | None = None
        for name in self.names:
            d = self._derived[name]
            if d.recipe == "leaf_state":
                if states is None:
                    states = leaf_states_of(self.graph, self._readable(), self.dtype, tokens=rows)
                value = states[d.attr("state")]
            else:
                first = self._readable()[d.args[0]][rows]
                value = compute_derived(d.recipe, [first] + [self._sources[a] for a in d.args[1:]], self.dtype)
            self.arrays[name][rows] = value
        if self._on_rows is not None:
            self._on_rows(rows)
        self._done[rows] = True
        self.rows_computed += len(rows)
        if self._done.all():
            self.complete = True

    def _readable(self) -> dict[str, np.ndarray]:
        return {**self._sources, **self.arrays}


def bind_deferred(graph: RecursiveGraph, params: Mapping[str, np.ndarray], dtype: str,
                  only: Collection[str]) -> tuple[dict[str, np.ndarray], TokenTables | None]:
    """The params a program reads (``only``), in ``dtype``, with the token tables as zero pages,
    and the :class:`TokenTables` that fills them; ``(bind_params' table, None)`` when ``graph``
    has none."""
    dt = np.dtype(dtype)
    names = token_table_names(graph)
    table, exact = bind_exact(graph, params, dtype=dt, compute_dtype=dt, only=only, defer=names)
    if not names:
        return table, None
    # what the recipes read (a leaf_state's args are the leaf case's params), as a snapshot in
    # the compile dtype: copies, so the model's later changes never reach the executable
    reads = {a for d in graph.derived if d.name in names for a in d.args} - set(names)
    sources = {n: np.array(exact[n], dtype=dt, copy=True) for n in sorted(reads)}
    own = {d.name: sparse_zeros(d.shape, dt) for d in graph.derived
           if d.name in names and d.name not in table}
    return table, TokenTables(graph, names, sources, dt, own)
