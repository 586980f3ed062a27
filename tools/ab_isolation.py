"""A/B of what ``cortex bench --isolation`` guards against: how much an idle Cortex executable
slows a peer down, in the peer's own process and from another process.

Pipeline position: outside the pipeline, a measurement tool for ``cortex.bench``'s fairness.
One peer at one point is timed in alternating rounds under four conditions:

* ``alone``: no Cortex executable anywhere (the in-process one closed, the other process stopped);
* ``same_process``: a live ``llvm`` executable of the same model in the peer's process, called
  just before (its worker threads idle, as between the calls of an in-process benchmark);
* ``other_process``: a live ``llvm`` executable, called just before, in another process that is
  left running (``--isolation process``);
* ``other_stopped``: the same process stopped with SIGSTOP (``--isolation stop``).

Each condition's median over all rounds, its ratio to ``alone`` and the range of the per-round
ratios go to the JSON.

Usage::

    python tools/ab_isolation.py --peer torch_levels --batch 10 --out ab.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cortex.bench import environment  # noqa: E402
from cortex.bench.contenders import ContenderSpec, build  # noqa: E402
from cortex.bench.isolation import make_host  # noqa: E402
from cortex.bench.summary import round_ratio_range  # noqa: E402
from cortex.bench.timing import Timing, measure, summarize  # noqa: E402
from cortex.bench.workloads import GroupKey  # noqa: E402

CONDITIONS = ("alone", "same_process", "other_process", "other_stopped")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="TreeLSTM")
    p.add_argument("--peer", default="torch_levels")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=30)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--min-time", type=float, default=0.3)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)

    group = GroupKey(args.model, args.hidden, None, 20000, 0)
    point = (args.tokens, args.batch)
    timing = Timing(min_reps=10, min_time_s=args.min_time, max_time_s=3 * args.min_time, warmup=2)
    peer = build(ContenderSpec("peer", args.peer), group, [point])
    if peer.status != "ok" or peer.points[point].status != "ok":
        raise SystemExit(f"peer {args.peer}: {peer.reason or peer.points[point].reason}")
    run_peer = peer.calls[(point, "call")]
    other = make_host("llvm-other", "stop", threads=0)
    llvm = ContenderSpec("cortex", "llvm")
    other.request("setup", 600, spec=llvm, group=group, points=[point])
    samples: dict[str, list[list[int]]] = {c: [] for c in CONDITIONS}
    try:
        for r in range(args.rounds):
            for cond in CONDITIONS[r % 4:] + CONDITIONS[: r % 4]:
                here = None
                if cond == "same_process":
                    here = build(llvm, group, [point])
                    here.calls[(point, "call")]()  # then idle, as between benchmark calls
                elif cond.startswith("other"):
                    other.request("measure", 600, point=point, variant="call",
                                  timing=Timing(min_reps=1, min_time_s=0.0, max_time_s=0.0, warmup=0))
                    if cond == "other_process":
                        other.resume()  # left running, idle (its team naps)
                samples[cond].append(measure(run_peer, timing))
                other.pause()
                if here is not None:
                    here.close()
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    finally:
        other.close()
    stats = {c: summarize(v) for c, v in samples.items()}
    alone = stats["alone"]
    doc = {"host": environment.host(), "versions": environment.versions(), "settings": vars(args),
           "median_ms": {c: s["median_ms"] for c, s in stats.items()},
           "over_alone": {c: s["median_ms"] / alone["median_ms"] for c, s in stats.items()},
           "over_alone_rounds": {c: round_ratio_range(s, alone) for c, s in stats.items()},
           "timing": stats}
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
