"""``cortex tune``: tune a model from the command line; list, export and import the records.

Pipeline position: outside the pipeline, the command-line face of :func:`cortex.tune`
(``cortex/cli.py`` only wires the subcommand in).

Naming a model: a zoo class with its settings, ``TreeLSTM:hidden=256,vocab=20000`` (values are
ints, floats, ``true``/``false`` or strings), or the path of a saved model where
``cortex.core.frontend.model.Model.load`` exists.

    cortex tune TreeLSTM:hidden=256 --target llvm --budget-trials 64 --budget-seconds 150 \\
        --batch-size 10 --nodes 60 --shape parse --out treelstm.jsonl
    cortex tune --list
    cortex tune --export records.jsonl
    cortex tune --import records.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_model(spec: str) -> Any:
    """The model a command line names (see the module docstring)."""
    from cortex.core.frontend.model import Model

    if os.path.exists(spec):
        load = getattr(Model, "load", None)
        if load is None:
            raise SystemExit(f"cortex tune: {spec!r} is a file, but this Cortex cannot load saved "
                             f"models; name a zoo model such as TreeLSTM:hidden=256")
        return load(spec)
    import cortex.models as zoo

    name, _, settings = spec.partition(":")
    cls = getattr(zoo, name, None)
    if name not in zoo.__all__ or cls is None:
        raise SystemExit(f"cortex tune: no zoo model {name!r}; known: {', '.join(zoo.__all__)}")
    kwargs = {}
    for item in filter(None, settings.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SystemExit(f"cortex tune: model setting {item!r} is not key=value")
        kwargs[key.strip()] = parse_value(value.strip())
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise SystemExit(f"cortex tune: {name}: {e}") from None


def add_parser(commands: Any) -> None:
    from cortex.tuning.tuner import HOLD

    p = commands.add_parser("tune", help="tune a model's schedule on a workload and store it; "
                            "list, export or import tuning records",
                            description="\n\n".join(__doc__.split("\n\n")[2:]),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="zoo model with settings (TreeLSTM:hidden=256) or a "
                   "saved model's path")
    p.add_argument("--target", default="llvm", help="target (default: llvm)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a target option, e.g. threads=1 (repeatable)")
    p.add_argument("--dtype", choices=("float32", "float64"), help="default: the model's")
    p.add_argument("--budget-trials", type=int, default=64, help="new candidates to measure (64)")
    p.add_argument("--budget-seconds", type=float, default=150.0,
                   help="seconds for the whole session, final check included (150)")
    p.add_argument("--method", choices=("model", "random"), default="model",
                   help="cost-model-guided (default) or random search")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=10, help="structures per batch (10)")
    p.add_argument("--nodes", type=int, default=60, help="mean nodes per structure (60)")
    p.add_argument("--shape", default="parse", choices=("parse", "balanced", "chain", "dag", "grid"))
    p.add_argument("--batches", type=int, default=3, help="batches in the workload (3)")
    p.add_argument("--no-resume", action="store_true", help="ignore earlier trials of this key")
    p.add_argument("--hold", default=",".join(HOLD), metavar="KNOB,..",
                   help="knobs kept at their default rule's value (default: %(default)s; '' searches "
                        "every knob)")
    p.add_argument("--in-process", action="store_true",
                   help="measure in this process (no worker, no timeouts)")
    p.add_argument("--db", help="records database (default: $CORTEX_TUNE_DB or the cache dir)")
    p.add_argument("--out", help="also write this session's record to a JSON-lines file")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--list", action="store_true", help="list the stored records")
    p.add_argument("--export", metavar="FILE", help="write every record to a JSON-lines file")
    p.add_argument("--import", dest="import_", metavar="FILE", help="read records from a "
                   "JSON-lines file (newer ones replace stored ones)")


def run(args: argparse.Namespace) -> int:
    from cortex.tuning.records import RecordStore

    store = RecordStore(args.db)
    if args.list or args.export or args.import_:
        if args.import_:
            counts = store.import_jsonl(args.import_)
            print(f"imported {args.import_} into {store.path}: {counts['stored']} stored, "
                  f"{counts['kept']} kept (a newer record was there), {counts['invalid']} invalid")
        if args.export:
            n = store.export_jsonl(args.export)
            print(f"exported {n} records from {store.path} to {args.export}")
        if args.list:
            records = store.records()
            print(f"{len(records)} tuning records in {store.path}")
            for r in records:
                print(f"  {r.id:4d}  {r.model:16s} {r.key.target:8s} {r.key.dtype:8s} "
                      f"{r.key.workload:18s} {r.speedup:5.2f}x  {r.trials:4d} trials  "
                      f"graph {r.key.graph[:10]} device {r.key.device[:10]}")
        return 0
    if not args.model:
        print("cortex tune: name a model (e.g. TreeLSTM:hidden=256) or give --list, --export "
              "or --import", file=sys.stderr)
        return 2
    import cortex
    from cortex.tuning.tuner import Budget
    from cortex.tuning.workload import WorkloadSpec

    options = {}
    for item in args.option:
        key, eq, value = item.partition("=")
        if not eq:
            print(f"cortex tune: --option {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        options[key] = parse_value(value)
    model = load_model(args.model)
    spec = WorkloadSpec(batch_size=args.batch_size, nodes=args.nodes, shape=args.shape,
                        batches=args.batches, seed=args.seed)
    result = cortex.tune(model, args.target, workload=spec, dtype=args.dtype,
                         budget=Budget(trials=args.budget_trials, seconds=args.budget_seconds),
                         method=args.method, seed=args.seed, resume=not args.no_resume,
                         db=store.path, isolate=not args.in_process,
                         hold=tuple(k.strip() for k in args.hold.split(",") if k.strip()), **options)
    if args.out and result.record is not None:
        store.export_jsonl(args.out, [result.record])
    if args.json:
        print(json.dumps({"summary": result.summary(), "speedup": result.speedup,
                          "schedule": result.schedule.to_dict(), "workload": result.key.workload,
                          "trials": len(result.trials), "curve": result.curve,
                          "final_check": result.final_check,
                          "record": result.record.id if result.record else None,
                          "database": str(store.path)}, indent=2))
    else:
        print(result.summary())
        print(f"schedule: {result.schedule.to_json()}")
        if result.record is not None:
            print(f"stored as tuning record {result.record.id} in {store.path}"
                  + (f"; written to {args.out}" if args.out else ""))
    return 0
