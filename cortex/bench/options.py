"""The settings of a ``cortex bench`` run and the command-line flags that make them.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. ``cortex/cli.py`` calls
:func:`add_arguments` on its ``bench`` subcommand and :func:`from_args` on what it parsed; the
runner (:mod:`cortex.bench.run`) reads only :class:`BenchOptions`.

The sweep: points ``(model, hidden, tokens, batch)``. ``star`` (default) varies one axis at a
time around the base point (the middle value of each list): batch sizes at the base hidden and
tokens, tree sizes at the base hidden and batch, hidden sizes at the base tokens and batch --
what the latency plots need, at a fraction of the full grid's cost. ``grid`` runs every
combination.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cortex.bench.isolation import ISOLATION_METHODS, default_isolation
from cortex.bench.timing import Timing
from cortex.bench.workloads import MODELS

DEFAULT_MODELS = ("TreeLSTM", "TreeGRU", "ChildSumTreeLSTM")


@dataclass(frozen=True)
class BenchOptions:
    models: tuple[str, ...] = DEFAULT_MODELS
    targets: tuple[str, ...] = ("llvm",)
    peers: tuple[str, ...] | None = None  # peer names or families; None: every default peer
    batches: tuple[int, ...] = (1, 10, 100)
    hiddens: tuple[int, ...] = (64, 256, 1024)
    tokens: tuple[int, ...] = (10, 30, 100)
    sweep: str = "star"  # "star" | "grid"
    embed: int | None = None  # None: equal to hidden
    vocab: int = 20000
    seed: int = 0
    rounds: int = 5
    timing: Timing = field(default_factory=Timing)
    threads: int = 0  # 0: every usable CPU, for Cortex and for the peers
    isolation: str = field(default_factory=default_isolation)
    variants: bool = False  # Cortex: also time call_uncached and run_prelinearized
    compile_options: tuple[tuple[str, Any], ...] = ()
    quick: bool = False
    roof: int = 4096  # size of the matrix product timed once per round as the FLOP roof (0: off)
    out: Path = Path("cortex-bench")
    plots: bool = True

    def __post_init__(self) -> None:
        for name in self.models:
            if name not in MODELS:
                raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
        for label, values in (("batch sizes", self.batches), ("hidden sizes", self.hiddens),
                              ("tree sizes", self.tokens)):
            if not values or min(values) < 1:
                raise ValueError(f"{label} must be positive integers, got {values}")
        if self.sweep not in ("star", "grid"):
            raise ValueError(f"sweep must be 'star' or 'grid', got {self.sweep!r}")
        if self.roof < 0:
            raise ValueError(f"roof must be >= 0 (0: off), got {self.roof}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.isolation not in ISOLATION_METHODS:
            raise ValueError(f"unknown isolation {self.isolation!r}; known: {', '.join(ISOLATION_METHODS)}")
        if not self.targets and self.peers == ():
            raise ValueError("nothing to measure: no targets and no peers")
        for t in self.targets:
            target_spec(t)  # a malformed spec fails here, before any worker starts

    @property
    def base(self) -> tuple[int, int, int]:
        """The base point's (hidden, tokens, batch): the middle value of each list."""
        def mid(v: tuple[int, ...]) -> int:
            s = sorted(set(v))
            return s[(len(s) - 1) // 2]
        return mid(self.hiddens), mid(self.tokens), mid(self.batches)

    def points(self) -> list[tuple[str, int, int, int]]:
        """Every (model, hidden, tokens, batch) of the sweep, grouped by (model, hidden)."""
        hb, tb, bb = self.base
        out: list[tuple[str, int, int, int]] = []
        for m in self.models:
            for h in sorted(set(self.hiddens)):
                if self.sweep == "grid":
                    pts = [(t, b) for t in sorted(set(self.tokens)) for b in sorted(set(self.batches))]
                elif h == hb:
                    pts = sorted({(tb, b) for b in self.batches} | {(t, bb) for t in self.tokens})
                else:
                    pts = [(tb, bb)]
                out += [(m, h, t, b) for t, b in pts]
        return out


def target_spec(text: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """A ``--targets`` entry: a target name, optionally with compile options for that contender
    alone, ``name:option=value[:option=value...]`` (``llvm:weights=bfloat16`` runs next to
    ``llvm``; the whole text is its name in the results). A value is read as JSON when it parses
    (numbers, ``true``), else kept as text. An option named like a schedule knob sets that knob
    over the target's default schedule: ``llvm:weights=bfloat16:bf16_dot=pairs`` compiles with
    ``schedule={"bf16_dot": "pairs"}`` (``threads`` stays the compile option of that name)."""
    from cortex.core.lowering.schedule import KNOB_NAMES

    name, *parts = text.split(":")
    if not name:
        raise ValueError(f"target spec {text!r} has no target name")
    options = []
    for part in parts:
        key, eq, value = part.partition("=")
        if not key or not eq:
            raise ValueError(f"target spec {text!r}: expected option=value after ':', got {part!r}")
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        options.append((key, parsed))
    knob = {k for k, _ in options if k in KNOB_NAMES and k != "threads"}  # threads: the option
    if knob:
        options = ([(k, v) for k, v in options if k not in knob]
                   + [("schedule", {k: v for k, v in options if k in knob})])
    return name, tuple(options)


QUICK = dict(models=("TreeLSTM", "ChildSumTreeLSTM"), batches=(1, 4), hiddens=(16, 32),
             tokens=(4, 8), vocab=100, rounds=2, roof=0,
             timing=Timing(min_reps=3, min_time_s=0.0, max_time_s=0.05, warmup=1))


def quick(options: BenchOptions) -> BenchOptions:
    """``options`` shrunk to the CI smoke run: tiny sizes, two rounds, a few calls each."""
    return replace(options, quick=True, **QUICK)


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _csv(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``cortex bench`` flags."""
    d = BenchOptions()
    p.add_argument("--models", type=_names, default=None, metavar="M,..",
                   help=f"zoo models (default: {','.join(d.models)}; known: {','.join(MODELS)})")
    p.add_argument("--targets", type=_names, default=d.targets, metavar="T,..",
                   help="Cortex targets (default: llvm; e.g. llvm,opencl,cuda,numpy; '' for none); "
                        "TARGET:option=value adds compile options to that contender alone, e.g. "
                        "llvm,llvm:weights=bfloat16. A target that cannot run here is recorded with the reason")
    p.add_argument("--peers", type=_names, default=None, metavar="P,..",
                   help="peers or families to compare with (default: every installed default peer: "
                        "numpy_levels, torch_levels, torch_naive, dynet_autobatch, ...; families "
                        "numpy, torch, dynet; opt-in: torch_compile_levels, torch_cuda_levels; '' for none)")
    p.add_argument("--batches", type=_ints, default=d.batches, metavar="B,..",
                   help=f"batch sizes (default: {_csv(d.batches)})")
    p.add_argument("--hidden", dest="hiddens", type=_ints, default=d.hiddens, metavar="H,..",
                   help=f"hidden sizes (default: {_csv(d.hiddens)})")
    p.add_argument("--tokens", type=_ints, default=d.tokens, metavar="N,..",
                   help="tree sizes: mean tokens per input, each drawn from [2N/3, 4N/3] "
                        f"(default: {_csv(d.tokens)})")
    p.add_argument("--sweep", choices=("star", "grid"), default=d.sweep,
                   help="star: one axis at a time around the middle values; grid: every combination")
    p.add_argument("--embed", type=int, default=None, help="embedding width (default: the hidden size)")
    p.add_argument("--vocab", type=int, default=d.vocab, help="vocabulary size (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--rounds", type=int, default=d.rounds,
                   help="interleaved rounds; every case is timed once per round (default: %(default)s)")
    p.add_argument("--min-reps", type=int, default=d.timing.min_reps, help="calls per case and round, at least")
    p.add_argument("--min-time", type=float, default=d.timing.min_time_s, help="seconds per case and round, at least")
    p.add_argument("--max-time", type=float, default=d.timing.max_time_s, help="seconds per case and round, at most")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for Cortex and for the peers (default 0: every usable CPU)")
    p.add_argument("--isolation", choices=tuple(ISOLATION_METHODS), default=default_isolation(),
                   help="stop (default): each contender in its own process, the others stopped "
                        "while one is timed; process: own processes, not stopped; inprocess: all "
                        "in this process (unfair to the peers; for comparison)")
    p.add_argument("--variants", action="store_true",
                   help="also time the Cortex calls without the linearizer cache and on a "
                        "prelinearized batch")
    p.add_argument("--max-table-mib", type=float, default=None,
                   help="compile option max_table_mib for every Cortex target")
    p.add_argument("--roof", type=int, default=d.roof, metavar="N",
                   help="time an N x N float32 NumPy matrix product once per round, with the peers' "
                        "threads, as the machine's FLOP roof; results get roof_fraction (default: "
                        "%(default)s; 0: off; --quick: off)")
    p.add_argument("--quick", action="store_true",
                   help="a tiny sweep that runs in well under a minute (CI): overrides the sizes, the "
                        "rounds and the timing (and the models, unless given)")
    p.add_argument("--out", type=Path, default=d.out,
                   help="directory for bench.json, report.md and the plots (default: %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="write the JSON and report.md only")


def from_args(ns: argparse.Namespace) -> BenchOptions:
    """The options the parsed flags ask for; a bad combination exits with the reason."""
    try:
        timing = Timing(min_reps=ns.min_reps, min_time_s=ns.min_time, max_time_s=ns.max_time)
    except ValueError as exc:
        raise SystemExit(f"cortex bench: {exc}") from None
    compile_options = () if ns.max_table_mib is None else (("max_table_mib", ns.max_table_mib),)
    try:
        opts = BenchOptions(models=ns.models or DEFAULT_MODELS, targets=ns.targets, peers=ns.peers,
                            batches=ns.batches, hiddens=ns.hiddens, tokens=ns.tokens, sweep=ns.sweep,
                            embed=ns.embed, vocab=ns.vocab, seed=ns.seed, rounds=ns.rounds,
                            timing=timing, threads=ns.threads, isolation=ns.isolation,
                            variants=ns.variants, compile_options=compile_options, roof=ns.roof, out=ns.out,
                            plots=not ns.no_plots)
    except ValueError as exc:
        raise SystemExit(f"cortex bench: {exc}") from None
    if not ns.quick:
        return opts
    opts = quick(opts)
    return replace(opts, models=ns.models) if ns.models else opts
