"""Ratios of a benchmark run: per point, every Cortex target against every peer.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. The runner
(:mod:`cortex.bench.run`) calls :func:`summarize` on its result records; the report
(:mod:`cortex.bench.report`) reads the summary. Every ratio is between medians measured in the
same interleaved rounds; ``*_rounds`` gives the range of the per-round ratios, which shows how
far a drift of the machine during the run could move it.
"""

from __future__ import annotations

from typing import Any

PointKey = tuple[str, int, int, int]  # (model, hidden, tokens, batch)


def point_key(r: dict[str, Any]) -> PointKey:
    return (r["model"], r["hidden"], r["tokens"], r["batch"])


def round_ratio_range(num: dict[str, Any], den: dict[str, Any]) -> list[float] | None:
    """[min, max] over rounds of ``num``'s round median over ``den``'s (same rounds)."""
    pairs = list(zip(num.get("round_medians_ms", []), den.get("round_medians_ms", [])))
    ratios = [a / b for a, b in pairs if b > 0]
    return [min(ratios), max(ratios)] if ratios else None


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per point: the peers' medians, the fastest CPU (and GPU) peer, and per target
    its median and ``speedup_vs_peer`` (peer median / target median: > 1 means Cortex is
    faster), ``speedup_vs_best_peer``, the like-for-like ``speedup_prepared_vs_best_peer``
    (when the prelinearized variant was timed) and ``time_over_target`` (other targets)."""
    order: list[PointKey] = []
    for r in records:
        if point_key(r) not in order:
            order.append(point_key(r))
    out = []
    for key in order:
        rows = [r for r in records if point_key(r) == key and "median_ms" in r]
        peers = [r for r in rows if r["kind"] == "peer"]
        cpu_peers = [r for r in peers if r["device"] == "cpu"]
        gpu_peers = [r for r in peers if r["device"] == "cuda"]
        best = min(cpu_peers, key=lambda r: r["median_ms"]) if cpu_peers else None
        best_gpu = min(gpu_peers, key=lambda r: r["median_ms"]) if gpu_peers else None
        entry: dict[str, Any] = {
            "model": key[0], "hidden": key[1], "tokens": key[2], "batch": key[3],
            "best_peer": best["name"] if best else None,
            "best_peer_ms": best["median_ms"] if best else None,
            "best_gpu_peer": best_gpu["name"] if best_gpu else None,
            "best_gpu_peer_ms": best_gpu["median_ms"] if best_gpu else None,
            "peers_ms": {r["name"]: r["median_ms"] for r in peers},
            "targets": {},
        }
        for r in rows:
            if r["kind"] != "cortex":
                continue
            t: dict[str, Any] = {k: r.get(k) for k in ("median_ms", "p10_ms", "p90_ms", "min_ms",
                                                      "spread", "gflops", "roof_fraction", "compile_s",
                                                      "first_call_ms")}
            t["speedup_vs_peer"] = {p["name"]: p["median_ms"] / r["median_ms"] for p in peers}
            t["speedup_vs_peer_rounds"] = {p["name"]: round_ratio_range(p, r) for p in peers}
            if best:
                t["speedup_vs_best_peer"] = best["median_ms"] / r["median_ms"]
            pre = r.get("variants", {}).get("run_prelinearized")
            if pre:
                t["prelinearized_ms"] = pre["median_ms"]
                if best:
                    # like for like: the peers prepare their index tensors outside the timed
                    # call, the prelinearized run gets a batch linearized outside it
                    t["speedup_prepared_vs_best_peer"] = best["median_ms"] / pre["median_ms"]
            if best_gpu and r["device"] == "cuda":
                t["speedup_vs_best_gpu_peer"] = best_gpu["median_ms"] / r["median_ms"]
            t["time_over_target"] = {o["name"]: r["median_ms"] / o["median_ms"] for o in rows
                                     if o["kind"] == "cortex" and o["name"] != r["name"]}
            entry["targets"][r["name"]] = t
        out.append(entry)
    return out
