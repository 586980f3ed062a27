"""Print the short table of a ``benchmarks/bench_treelstm.py`` JSON: the ``cuda`` target next to
the PyTorch CUDA peer (and the best CPU peer), per model and batch.

Used last by ``tools/gpu_check.sh`` so the table ends its output. Usage:
``python tools/gpu_bench_summary.py bench_treelstm.json``.
"""

from __future__ import annotations

import json
import sys


def table(doc: dict) -> list[str]:
    lines = [f"{'model':10} {'batch':>5} {'cuda ms':>9} {'(prelin.)':>9} {'torch cuda':>10} "
             f"{'vs torch cuda':>13} {'best cpu peer':>22}"]
    for e in doc.get("summary", []):
        t = e.get("targets", {}).get("cuda", {})
        gpu = e.get("best_gpu_peer_ms")
        cpu = f"{e['best_peer']} {e['best_peer_ms']:.3f}" if e.get("best_peer") else "-"

        def ms(v: float | None) -> str:
            return f"{v:.3f}" if isinstance(v, (int, float)) else "-"

        ratio = t.get("speedup_vs_best_gpu_peer")
        lines.append(f"{e['model']:10} {e['batch']:>5} {ms(t.get('median_ms')):>9} {ms(t.get('prelinearized_ms')):>9} "
                     f"{ms(gpu):>10} {(f'{ratio:.1f}x' if ratio else '-'):>13} {cpu:>22}")
    for r in doc.get("results", []):
        if r.get("status") not in (None, "ok"):
            lines.append(f"  {r.get('name')} b{r.get('batch')}: {r.get('status')}: {r.get('reason', '')}")
    for name, state in doc.get("targets", {}).items():
        if state.get("status") != "ok":
            lines.append(f"  target {name}: {state.get('status')}: {state.get('reason', '')}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"no benchmark JSON to summarize: {e}", file=sys.stderr)
        return 1
    print("\n".join(table(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
