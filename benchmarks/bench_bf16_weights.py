"""bfloat16 weights (``weights="bfloat16"``) next to float32: accuracy and time per call.

Pipeline position: outside the pipeline. For each zoo model (the ``cortex bench`` workloads:
random weights, realistic inputs of ``--tokens`` mean size) it compiles the float32 executable
and the bfloat16-weights one on ``--target``, then

* accuracy: every node's states of both against the float64 reference on the same (unrounded)
  weights, and bfloat16 against float32: max and mean absolute error, max relative error
  of the elements of at least 1% of their state's largest magnitude, the relative L2 error, and
  the largest scaled error (``max |d| / max(1, max |want|)``: what the conformance tolerance
  bounds);
* time: ``exe(structures)`` (the linearizer included) in interleaved rounds, both variants once
  per round in alternating order, medians and the ratio bfloat16 / float32 (< 1: faster).

Usage::

    python benchmarks/bench_bf16_weights.py --out bf16.json              # every zoo model, h256, b1
    python benchmarks/bench_bf16_weights.py --models TreeLSTM --batches 1,10 --out b.json
    python benchmarks/bench_bf16_weights.py --quick                      # smoke test, seconds
    python benchmarks/bench_bf16_weights.py --amx --out amx.json         # and bf16_dot="amx"
    python benchmarks/bench_bf16_weights.py --dpbf16 --out dp.json       # and bf16_dot="dpbf16"
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout: make `cortex` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import cortex  # noqa: E402
from benchmarks.common import add_ab_arguments, environment, time_calls, write_json  # noqa: E402
from cortex.bench.workloads import MODELS, GroupKey, build_model, make_inputs  # noqa: E402
from cortex.core.frontend.reference import evaluate  # noqa: E402

#: name -> (weights, bf16_dot knob over the default schedule; None: the default schedule)
VARIANTS = {"float32": ("float32", None), "bfloat16": ("bfloat16", "widen"),
            "bfloat16_pairs": ("bfloat16", "pairs")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="llvm")
    p.add_argument("--models", default=",".join(MODELS), help="zoo models (default: all)")
    p.add_argument("--hidden", type=int, default=256, help="the sweep's hidden size (MV-RNN: a quarter)")
    p.add_argument("--tokens", type=int, default=30, help="mean tokens per input")
    p.add_argument("--batches", default="1", help="comma list of batch sizes (default: 1)")
    p.add_argument("--amx", action="store_true", help="also bf16_dot='amx' (AMX tiles; needs a CPU "
                   "and kernel that offer them)")
    p.add_argument("--dpbf16", action="store_true", help="also bf16_dot='dpbf16' (vdpbf16ps; needs a "
                   "CPU with AVX512-BF16)")
    add_ab_arguments(p)
    return p.parse_args(argv)


def rounded_dots(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``bf16_dot`` choices that round the activations too, asked for on the command line."""
    return tuple(dot for dot, asked in (("amx", args.amx), ("dpbf16", args.dpbf16)) if asked)


def errors(got: dict, want: dict) -> dict:
    """Error statistics of ``got`` against ``want`` over every state and node: max and mean
    absolute error; the largest relative error of an element of at least a hundredth of its
    state's largest magnitude (smaller ones are near zero crossings, where any rounding is a
    large relative error); the relative L2 error ``|got - want| / |want|`` of the worst state;
    the largest error scaled by ``max(1, max |want|)`` (what the conformance tolerance bounds)."""
    diffs = {s: np.abs(np.asarray(got[s], np.float64) - np.asarray(want[s], np.float64)) for s in want}
    mags = {s: np.abs(np.asarray(want[s], np.float64)) for s in want}
    d = np.concatenate([v.ravel() for v in diffs.values()])
    rel = max(float((diffs[s] / mags[s])[mags[s] >= 0.01 * mags[s].max()].max(initial=0.0))
              for s in want)
    l2 = max(float(np.linalg.norm(diffs[s]) / max(np.linalg.norm(mags[s]), 1e-30)) for s in want)
    scaled = max(float(diffs[s].max()) / max(1.0, float(mags[s].max())) for s in want)
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()), "max_rel": rel,
            "rel_l2": l2, "max_scaled": scaled}


def measure(model_name: str, batch_size: int, args: argparse.Namespace) -> dict:
    key = GroupKey(model_name, args.hidden, None, 20000, seed=1)
    model = build_model(key)
    width = model.params["U"].shape[1] if model_name == "DAGRNN" else MODELS[model_name].hidden(args.hidden)
    structures = make_inputs(model_name, args.tokens, batch_size, vocab=20000, width=width, seed=1).structures
    extra = {"threads": args.threads} if args.threads else {}
    exes = {"float32": cortex.compile(model, target=args.target, **extra)}
    default = exes["float32"].schedule.to_dict()
    variants = {**VARIANTS, **{f"bfloat16_{dot}": ("bfloat16", dot) for dot in rounded_dots(args)}}
    for v, (weights, dot) in variants.items():
        if dot is not None:
            exes[v] = cortex.compile(model, target=args.target, weights=weights,
                                     schedule={**default, "bf16_dot": dot}, **extra)
    outs = {v: exe(structures) for v, exe in exes.items()}
    batch = outs["float32"].batch
    ref = evaluate(model.trace(), model.params, batch)
    nodes = {v: {s: o.nodes(s) for s in o.states} for v, o in outs.items()}
    stored = [n.split(": ", 1)[1] for n in exes["bfloat16"].notes if n.startswith("weights:")]
    names = tuple(variants)
    samples: dict[str, list[float]] = {v: [] for v in names}
    for r in range(args.rounds):
        for v in names[r % len(names):] + names[:r % len(names)]:
            samples[v].append(time_calls(lambda: exes[v](structures), args.min_time))
    med = {v: statistics.median(s) for v, s in samples.items()}
    return {
        "model": model_name, "hidden": MODELS[model_name].hidden(args.hidden), "batch": batch_size,
        "nodes": batch.num_nodes, "levels": batch.num_levels, "stored": stored,
        "float32_vs_reference": errors(nodes["float32"], ref),
        "bfloat16_vs_reference": errors(nodes["bfloat16"], ref),
        "bfloat16_vs_float32": errors(nodes["bfloat16"], {s: np.asarray(a, np.float64)
                                                          for s, a in nodes["float32"].items()}),
        "pairs_vs_bfloat16": errors(nodes["bfloat16_pairs"], {s: np.asarray(a, np.float64)
                                                              for s, a in nodes["bfloat16"].items()}),
        **{key: value for dot in rounded_dots(args) for key, value in (
            (f"{dot}_vs_reference", errors(nodes[f"bfloat16_{dot}"], ref)),
            (f"{dot}_vs_float32", errors(nodes[f"bfloat16_{dot}"], {s: np.asarray(a, np.float64)
                                                                    for s, a in nodes["float32"].items()})),
            (f"ratio_{dot}_to_fp32", med[f"bfloat16_{dot}"] / med["float32"]),
            (f"ratio_{dot}_to_pairs", med[f"bfloat16_{dot}"] / med["bfloat16_pairs"]))},
        "median_ms": med, "ratio_bf16_to_fp32": med["bfloat16"] / med["float32"],
        "ratio_pairs_to_fp32": med["bfloat16_pairs"] / med["float32"],
        "ratio_pairs_to_bf16": med["bfloat16_pairs"] / med["bfloat16"], "samples_ms": samples,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.hidden, args.rounds, args.min_time = 32, 3, 0.02
    doc = {"benchmark": "bf16_weights", "target": args.target, "tokens": args.tokens,
           "rounds": args.rounds, "min_time_s": args.min_time, "threads": args.threads,
           "command": " ".join(sys.argv), "environment": environment(), "results": []}
    for model_name in args.models.split(","):
        for b in (int(x) for x in args.batches.split(",")):
            res = measure(model_name, b, args)
            doc["results"].append(res)
            e = res["bfloat16_vs_float32"]
            print(f"{model_name} h{res['hidden']} b{b}: fp32 {res['median_ms']['float32']:.3f} ms, "
                  f"bf16 {res['median_ms']['bfloat16']:.3f} ms (x{res['ratio_bf16_to_fp32']:.3f}), "
                  f"pairs {res['median_ms']['bfloat16_pairs']:.3f} ms (x{res['ratio_pairs_to_fp32']:.3f}); "
                  f"bf16 vs fp32 max abs {e['max_abs']:.2e} mean abs {e['mean_abs']:.2e} "
                  f"max rel {e['max_rel']:.2e} rel l2 {e['rel_l2']:.2e}", file=sys.stderr)
            for dot in rounded_dots(args):
                a = res[f"{dot}_vs_reference"]
                print(f"  {dot} {res['median_ms'][f'bfloat16_{dot}']:.3f} ms (x{res[f'ratio_{dot}_to_fp32']:.3f} "
                      f"of fp32, x{res[f'ratio_{dot}_to_pairs']:.3f} of pairs); vs reference max abs "
                      f"{a['max_abs']:.2e} mean abs {a['mean_abs']:.2e} rel l2 {a['rel_l2']:.2e} "
                      f"scaled {a['max_scaled']:.2e}", file=sys.stderr)
    write_json(doc, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
