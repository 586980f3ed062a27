"""``cortex bench``: Cortex next to other implementations of the same models, fairly timed.

Pipeline position: outside the compiler pipeline; a user-facing tool built on the public API
(``cortex.compile``) and the reference evaluator. Modules, in the order a run uses them:

* :mod:`~cortex.bench.options` -- the settings and the command-line flags; the sweep's points;
* :mod:`~cortex.bench.workloads` -- the models, their seeded inputs, FLOP counts;
* :mod:`~cortex.bench.isolation` -- worker processes, stopped while another contender is timed;
* :mod:`~cortex.bench.worker`, :mod:`~cortex.bench.contenders`, :mod:`~cortex.bench.peers` --
  what runs inside a worker: a Cortex executable or a peer, checked, then timed
  (:mod:`~cortex.bench.timing`);
* :mod:`~cortex.bench.run` -- the rounds and the JSON; :mod:`~cortex.bench.summary` -- ratios;
* :mod:`~cortex.bench.report` -- ``report.md`` and the plots (matplotlib: ``pip install
  'cortex-compiler[bench]'``).

``docs/bench.md`` is the user's guide and describes the JSON.
"""

from __future__ import annotations

import sys
from cortex.bench.options import BenchOptions


def main(opts: BenchOptions) -> int:
    """Run, write ``bench.json``, ``report.md`` and the plots into ``opts.out``; print the
    summary. Exit status 1 when a contender's numbers did not match the reference."""
    from cortex.bench.report import write_report
    from cortex.bench.run import run, write_json

    doc = run(opts)
    opts.out.mkdir(parents=True, exist_ok=True)
    write_json(doc, opts.out / "bench.json")
    written = write_report(doc, opts.out, plots=opts.plots)
    print(f"wrote {opts.out / 'bench.json'}", file=sys.stderr)
    for line in written.messages:
        print(line, file=sys.stderr)
    print(written.table)
    wrong = [r for r in doc["results"] if r["status"] == "wrong"]
    for r in doc["results"]:
        if r["status"] in ("wrong", "error"):
            print(f"{r['status'].upper()}: {r['model']} h{r['model_hidden']} t{r['tokens']} "
                  f"b{r['batch']} {r['kind']} {r['name']}: {r['reason']}", file=sys.stderr)
    return 1 if wrong else 0


__all__ = ["BenchOptions", "main"]
