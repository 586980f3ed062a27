"""``cortex run``: a model over a Parquet file or a folder of Python files, on Ray.

Pipeline position: the command line's way into :func:`cortex.distributed.job.run_inference`.
``cortex/cli.py`` adds the subcommand with :func:`add_run_parser` and calls
:func:`run_command`; nothing here imports Ray until a run starts.

    cortex run ChildSumTreeLSTM:hidden=64,embed=32,vocab=ast src/ out.parquet \\
        --unit function                         # every function below src/, this machine
    cortex run model.cortex in.parquet out.parquet --address ray://head:10001   # a cluster

MODEL is a file ``exe.save`` wrote (compiled as saved), a file ``model.save`` wrote, or a zoo
spec (those two compile for ``--target`` with ``--option``s). Without ``--address`` Ray starts
on this machine (``ray.init()``, every core); ``--address`` joins a running cluster (``auto``,
``ray://host:10001``). ``--actors`` defaults to the cluster's CPUs divided by ``--threads``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: The forms a file can hold (``object`` rows exist only in a Ray Dataset made in Python).
FILE_FORMS = ("python", "sexpr", "parents")


def add_run_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``run`` to the ``cortex`` command's subparsers."""
    run = commands.add_parser(
        "run", help="run a model over a Parquet file or a folder of Python files on Ray "
                    "(this machine or a cluster); root states to a Parquet file",
        description="Run a compiled model over every row of INPUT with a pool of Ray actors "
                    "and write each row's id, root states and error (if any) to OUTPUT.")
    run.add_argument("model",
                     help="a saved executable (exe.save), a saved model (model.save), or a zoo "
                          "spec Name:key=value,... (ChildSumTreeLSTM:hidden=64,embed=32,vocab=ast)")
    run.add_argument("input", type=Path,
                     help="a Parquet file (or folder of them), or a folder of Python files")
    run.add_argument("output", type=Path, help="the Parquet file to write")
    run.add_argument("--weights", type=Path, help="a zoo spec's weights (.npz, Model.save_npz); "
                                                  "default: its seeded random weights")
    run.add_argument("--target", help="target to compile a model for (default: llvm)")
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="a compile option for a model (repeatable), e.g. --option opt_level=2")
    run.add_argument("--threads", type=int, default=1,
                     help="CPU threads per actor (default: 1)")
    run.add_argument("--actors", type=int,
                     help="actors in the pool (default: the cluster's CPUs / --threads)")
    run.add_argument("--batch-size", type=int, default=256, help="rows per call (default: 256)")
    run.add_argument("--address", help="a running Ray cluster (auto, ray://host:10001); "
                                       "default: start Ray on this machine")
    run.add_argument("--column", help="the input column holding the structures "
                                      "(default: source, sexpr, parents or tree)")
    run.add_argument("--form", choices=FILE_FORMS, help="how to read that column "
                                                   "(default: from its name)")
    run.add_argument("--id-column", default="id", help="the input's id column (default: id; "
                                                       "row numbers when a Parquet file has none)")
    run.add_argument("--words-column", help="token ids of parent-array rows (default: words)")
    run.add_argument("--vocab", type=Path, help="a vocabulary file (one token a line) for "
                                                "s-expressions with word tokens")
    run.add_argument("--unit", choices=("file", "function"), default="file",
                     help="a folder of Python files: one row per file or per function")
    run.add_argument("--states", help="root states to write, comma-separated "
                                      "(default: the model's outputs)")
    run.add_argument("--fail-fast", action="store_true",
                     help="fail on the first row that cannot be read (default: an error record)")
    run.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    run.add_argument("--no-progress", action="store_true", help="print no progress")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    return run


def _options(items: list[str]) -> dict[str, Any]:
    from cortex.distributed.sources import spec_value

    options = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--option {item!r} is not KEY=VALUE")
        options[key] = spec_value(key, value)
    return options


def _is_parquet(path: Path) -> bool:
    if path.is_file():
        return True
    return path.is_dir() and any(path.glob("*.parquet"))


def _rows(args: argparse.Namespace) -> Any:
    from cortex.distributed.inputs import parquet_rows, python_rows

    if not args.input.exists():
        raise FileNotFoundError(f"no input {args.input}")
    if _is_parquet(args.input):
        return parquet_rows(args.input, args.id_column)
    if args.id_column != "id":
        raise ValueError("--id-column applies to Parquet input; a folder of Python files has "
                         "the ids 'path' or 'path:line:name'")
    return python_rows(args.input, args.unit)


def run_command(args: argparse.Namespace) -> int:
    """``cortex run``: 0 on success (rows that failed are records in the output), 1 on error."""
    from cortex.distributed.commit import CommitError, check_destination
    from cortex.distributed.inputs import to_dataset
    from cortex.distributed.job import RowError, require_ray, run_inference
    from cortex.distributed.rows import input_columns
    from cortex.distributed.sources import load_source

    ray = None
    started = False  # Ray started here, and stopped here
    try:
        ray = require_ray()
        check_destination(args.output, args.overwrite)
        source = load_source(args.model, threads=args.threads, target=args.target,
                             options=_options(args.option), weights=args.weights)
        source.check()
        vocab = None
        if args.vocab is not None:
            from cortex.data import Vocabulary

            vocab = Vocabulary.load(args.vocab)
        table = _rows(args)
        read = input_columns(table.column_names, id_column=args.id_column, column=args.column,
                             form=args.form, words_column=args.words_column)
        if not ray.is_initialized():
            ray.init(address=args.address, logging_level="WARNING")
            started = True
        actors = args.actors or max(1, int(ray.cluster_resources().get("CPU", 1)) // args.threads)
        report = run_inference(
            to_dataset(table.select(read.names), args.batch_size), source, args.output,
            column=read.column, form=read.form, id_column=read.id, words_column=read.words,
            states=args.states.split(",") if args.states else None, actors=actors,
            batch_size=args.batch_size, fail_fast=args.fail_fast, vocab=vocab,
            overwrite=args.overwrite, progress=not args.no_progress)
    except (ValueError, TypeError, OSError, ImportError, CommitError, RowError) as e:
        print(f"cortex run: error: {e}", file=sys.stderr)
        return 1
    finally:
        if started:
            ray.shutdown()
    data = {"output": str(report.output), "rows": report.rows, "errors": report.errors,
            "duplicates_dropped": report.duplicates_dropped, "actors": report.actors,
            "threads": report.threads, "source": report.source,
            "prepare_seconds": round(report.prepare_seconds, 3),
            "startup_seconds": round(report.startup_seconds, 3),
            "seconds": round(report.seconds, 3),
            "rows_per_second": round(report.rows_per_second, 1)}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(f"{report.rows} rows ({report.errors} errors) -> {report.output} in "
              f"{report.seconds:.1f} s ({report.rows_per_second:.0f} rows/s) with "
              f"{report.actors} actors x {report.threads} threads; {report.source}")
    return 0
