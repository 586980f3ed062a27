"""Cold vs warm compiles in fresh processes, and save/load round trips across processes.

Pipeline position: outside the pipeline, a measurement tool for the disk cache
(``cortex.core.diskcache``) and persistence (``cortex.core.persist``). Every measurement runs
in a fresh Python process, as a user's second process would:

* ``compile``: TreeLSTM (hidden 256, embed 256, vocab 20000 by default) compiled for each
  target, alternating *cold* (an empty ``CORTEX_CACHE_DIR``; for opencl also an empty
  ``POCL_CACHE_DIR``, PoCL's own kernel cache) and *warm* (the second process on the cache the
  cold one filled). Timed: the ``cortex.compile`` call (plugins are loaded before it, as any
  earlier use would) in wall time and in CPU time of the process (``process_time``, all its
  threads: the measure a busy machine distorts least), the first call on a small batch, and
  the whole process.
* ``roundtrip``: process A compiles, runs a batch and saves the executable; process B loads it
  and runs the same batch; the outputs must be bit-equal. Timed: the ``cortex.load`` call.

Usage::

    python tools/bench_persist.py --rounds 3 --out persist.json
    python tools/bench_persist.py --targets llvm --hidden 64 --vocab 1000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMPILE = r"""
import json, sys, time
t0 = time.perf_counter()
import cortex
from cortex.core.api import resolve_target
from cortex.models import TreeLSTM
sys.path.insert(0, {root!r})
from benchmarks.common import make_trees
target, hidden, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model = TreeLSTM(hidden=hidden, embed=hidden, vocab=vocab, seed=0)
resolve_target(target)  # the plugins, loaded by any earlier use of cortex
t1, c1 = time.perf_counter(), time.process_time()
exe = cortex.compile(model, target=target)
t2, c2 = time.perf_counter(), time.process_time()
exe(make_trees(1, 10, 10, 40, vocab))
t3 = time.perf_counter()
print(json.dumps({{"compile_s": t2 - t1, "compile_cpu_s": c2 - c1, "first_call_s": t3 - t2,
                  "process_s": t3 - t0, "origins": {{e.namespace: e.origin for e in exe.cache_entries}}}}))
"""

SAVE = r"""
import json, sys, numpy as np, cortex
from cortex.models import TreeLSTM
sys.path.insert(0, {root!r})
from benchmarks.common import make_trees
target, hidden, vocab, path, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
exe = cortex.compile(TreeLSTM(hidden=hidden, embed=hidden, vocab=vocab, seed=0), target=target)
res = exe(make_trees(2, 50, 5, 40, vocab))
np.savez(out, **{{s: res.nodes(s) for s in res.states}})
exe.save(path)
"""

LOAD = r"""
import json, sys, time, numpy as np, cortex
sys.path.insert(0, {root!r})
from benchmarks.common import make_trees
path, want, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
cortex.core.api.resolve_target(json.loads(__import__("zipfile").ZipFile(path).read("manifest.json"))["target"])
t = time.perf_counter()
exe = cortex.load(path)
load_s = time.perf_counter() - t
res = exe(make_trees(2, 50, 5, 40, vocab))
with np.load(want) as w:
    equal = all(np.array_equal(res.nodes(s), w[s]) for s in res.states)
print(json.dumps({{"load_s": load_s, "bit_equal": equal,
                  "origins": {{e.namespace: e.origin for e in exe.cache_entries}}}}))
"""


def _run(code: str, args: list[str], env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", code.format(root=str(ROOT)), *args],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"a measured process failed:\n{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def _env(cache: Path, pocl: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CORTEX_CACHE", "PYTHONDONTWRITEBYTECODE")}
    env.update(CORTEX_CACHE_DIR=str(cache), POCL_CACHE_DIR=str(pocl), CORTEX_PROGRESS="0")
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="llvm,opencl")
    p.add_argument("--roundtrip-targets", default="llvm,opencl,numpy")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3, help="cold/warm alternations per target")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    size = [str(a.hidden), str(a.vocab)]
    report: dict = {"model": f"TreeLSTM(hidden={a.hidden}, embed={a.hidden}, vocab={a.vocab})",
                    "compile": {}, "roundtrip": {}}
    with tempfile.TemporaryDirectory(prefix="cortex-bench-persist-") as tmp:
        tmp_path = Path(tmp)
        _run(COMPILE, ["numpy", *size], _env(tmp_path / "warm-up", tmp_path / "pocl-w"))  # .pyc files
        for target in filter(None, a.targets.split(",")):
            rows = []
            for r in range(a.rounds):
                env = _env(tmp_path / f"{target}-{r}", tmp_path / f"pocl-{target}-{r}")
                cold = _run(COMPILE, [target, *size], env)
                warm = _run(COMPILE, [target, *size], env)
                rows.append({"cold": cold, "warm": warm})
                print(f"{target} round {r}: cold compile {cold['compile_s']:.3f} s ({cold['compile_cpu_s']:.3f} "
                      f"CPU-s; first call {cold['first_call_s']:.3f}), warm compile {warm['compile_s']:.3f} s "
                      f"({warm['compile_cpu_s']:.3f} CPU-s; first call {warm['first_call_s']:.3f}) "
                      f"{warm['origins']}", flush=True)
            med = {k: {m: statistics.median(row[k][m] for row in rows)
                       for m in ("compile_s", "compile_cpu_s", "first_call_s", "process_s")}
                   for k in ("cold", "warm")}
            report["compile"][target] = {"rounds": rows, "median": med,
                                         "warm_over_cold": med["warm"]["compile_s"] / med["cold"]["compile_s"]}
        for target in filter(None, a.roundtrip_targets.split(",")):
            env = _env(tmp_path / f"rt-{target}", tmp_path / f"pocl-rt-{target}")
            path, want = tmp_path / f"{target}.cortex", tmp_path / f"{target}.npz"
            _run(SAVE, [target, *size, str(path), str(want)], env)
            fresh = _env(tmp_path / f"rt-{target}-other", tmp_path / f"pocl-rt-{target}")  # no shared cache
            res = _run(LOAD, [str(path), str(want), str(a.vocab)], fresh)
            res["file_bytes"] = path.stat().st_size
            report["roundtrip"][target] = res
            print(f"{target} save/load: bit-equal {res['bit_equal']}, load {res['load_s']:.3f} s, "
                  f"file {res['file_bytes'] / 2**20:.1f} MiB {res['origins']}", flush=True)
    text = json.dumps(report, indent=2)
    if a.out:
        a.out.write_text(text + "\n")
    else:
        print(text)
    return 0 if all(r["bit_equal"] for r in report["roundtrip"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
