"""The report of a ``cortex bench`` run: ``report.md``, a text table and the plots.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``; it reads only the JSON
document (:mod:`cortex.bench.run`), so a report can be remade from a saved ``bench.json``
(``python -m cortex.bench.report bench.json``).

Plots (matplotlib, the ``bench`` extra; without it the report says how to get them):
``latency.png`` -- median latency (with the p10-p90 band) against batch size, tree size and
hidden size, one row per model, one line per Cortex target (solid) and peer (dashed), log axes;
``speedup.png`` -- the same axes, each Cortex target's speedup over each peer (peer median /
target median; above 1 is faster than the peer).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cortex.core.plugin.distribution import pip_install

AXES = (("batch", "batch size (inputs per call)"), ("tokens", "tree size (tokens per input)"),
        ("hidden", "hidden size"))
TARGET_COLORS = {"llvm": "#1f4e9c", "opencl": "#2e8b3a", "cuda": "#6a3d9a", "numpy": "#7f7f7f"}
PEER_COLORS = ("#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#9467bd")
PEER_MARKERS = ("s", "^", "v", "D", "P", "X", "*")


@dataclass
class Written:
    files: list[Path] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    table: str = ""


# ------------------------------------------------------------------ selecting the data


def axis_records(doc: dict[str, Any], model: str, axis: str) -> list[dict[str, Any]]:
    """The timed results of ``model`` along ``axis``: the other two sizes at the base point."""
    base = doc["settings"]["base"]
    fixed = {"batch": ("hidden", "tokens"), "tokens": ("hidden", "batch"),
             "hidden": ("tokens", "batch")}[axis]
    return [r for r in doc["results"] if r["model"] == model and "median_ms" in r
            and all(r[k] == base[k] for k in fixed)]


def axis_value(r: dict[str, Any], axis: str) -> int:
    return r["model_hidden"] if axis == "hidden" else r[axis]


def contenders(doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(Cortex targets, peers) that have at least one timed result, in run order."""
    targets, peers = [], []
    for r in doc["results"]:
        if "median_ms" in r:
            bucket = targets if r["kind"] == "cortex" else peers
            if r["name"] not in bucket:
                bucket.append(r["name"])
    return targets, peers


def styles(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    targets, peers = contenders(doc)
    out = {t: {"color": TARGET_COLORS.get(t, "#000000"), "marker": "o", "linestyle": "-",
               "linewidth": 2.4} for t in targets}
    for i, p in enumerate(peers):
        out[p] = {"color": PEER_COLORS[i % len(PEER_COLORS)], "marker": PEER_MARKERS[i % len(PEER_MARKERS)],
                  "linestyle": "--", "linewidth": 1.4}
    return out


def speedups(doc: dict[str, Any], model: str, axis: str, target: str, peer: str) -> list[tuple[int, float]]:
    """(axis value, peer median / target median) along ``axis``, where both were timed."""
    recs = axis_records(doc, model, axis)
    t = {axis_value(r, axis): r["median_ms"] for r in recs if r["name"] == target and r["kind"] == "cortex"}
    p = {axis_value(r, axis): r["median_ms"] for r in recs if r["name"] == peer and r["kind"] == "peer"}
    return sorted((x, p[x] / t[x]) for x in t.keys() & p.keys())


# ------------------------------------------------------------------ plots


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _figure(rows: int, cols: int) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(4.6 * cols, 3.5 * rows + 1.2), layout="constrained")


def _log_axis(ax: Any, values: list[int]) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(values))))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(v) for v in sorted(set(values))])
    ax.grid(True, which="major", alpha=0.3)


def _log_y(ax: Any) -> None:
    """Log y axis labelled with plain numbers (0.1, 1, 10); more labels on shorter spans."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    span = hi / lo
    subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0) if span < 10 else (1.0, 2.0, 5.0) if span < 10**2.2 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    if math.isfinite(lo) and math.isfinite(hi):
        ax.set_ylim(lo, hi)


def _fixed(doc: dict[str, Any], axis: str) -> str:
    """The sizes held at the base point along ``axis``, e.g. "hidden 256, tokens 30"."""
    base = doc["settings"]["base"]
    return ", ".join(f"{k} {base[k]}" for k in ("hidden", "tokens", "batch") if k != axis)


def _title(doc: dict[str, Any], what: str) -> str:
    h = doc["host"]
    threads = doc["settings"]["threads"] or "all"
    return (f"{what} -- {h['cpu']}, {h['usable_cpus']} CPUs, threads: {threads}, "
            f"isolation: {doc['fairness']['isolation']}, {doc['created_utc'][:10]}")


def _grid_plot(doc: dict[str, Any], path: Path, draw: Any, ylabel: str, what: str) -> None:
    """One panel per model (rows) and axis (columns); ``draw(ax, model, axis)`` plots a panel
    and returns the x values it used and its lines by legend label."""
    models = doc["settings"]["models"]
    fig = _figure(len(models), len(AXES))
    axes = fig.subplots(len(models), len(AXES), squeeze=False)
    handles: dict[str, Any] = {}
    for i, model in enumerate(models):
        for j, (axis, label) in enumerate(AXES):
            ax = axes[i][j]
            xs, lines = draw(ax, model, axis)
            handles.update(lines)
            if xs:
                _log_axis(ax, xs)
            _log_y(ax)
            ax.set_title(f"{model}  ({_fixed(doc, axis)})", fontsize=9.5)
            ax.set_xlabel(label, fontsize=9)
            if j == 0:
                ax.set_ylabel(ylabel, fontsize=9)
    fig.suptitle(_title(doc, what), fontsize=10)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center",
               ncol=min(len(handles), 6), fontsize=9, frameon=False)
    fig.savefig(path, dpi=110)


def plot_latency(doc: dict[str, Any], path: Path) -> None:
    style = styles(doc)

    def draw(ax: Any, model: str, axis: str) -> tuple[list[int], dict[str, Any]]:
        recs = axis_records(doc, model, axis)
        lines = {}
        for name, st in style.items():
            pts = sorted((axis_value(r, axis), r) for r in recs if r["name"] == name)
            if not pts:
                continue
            xs = [x for x, _ in pts]
            (lines[name],) = ax.plot(xs, [r["median_ms"] for _, r in pts], label=name, markersize=5, **st)
            ax.fill_between(xs, [r["p10_ms"] for _, r in pts], [r["p90_ms"] for _, r in pts],
                            color=st["color"], alpha=0.09, linewidth=0)
        return [axis_value(r, axis) for r in recs], lines

    _grid_plot(doc, path, draw, "median latency per call (ms)",
               "Latency (median, band p10-p90; lower is better)")


def plot_speedup(doc: dict[str, Any], path: Path) -> None:
    targets, peers = contenders(doc)
    style = styles(doc)
    dashes = ("-", ":", "-.", "--")

    def draw(ax: Any, model: str, axis: str) -> tuple[list[int], dict[str, Any]]:
        xs: list[int] = []
        lines = {}
        for k, t in enumerate(targets):
            for p in peers:
                pts = speedups(doc, model, axis, t, p)
                if not pts:
                    continue
                xs += [x for x, _ in pts]
                name = f"{t} over {p}" if len(targets) > 1 else f"over {p}"
                (lines[name],) = ax.plot([x for x, _ in pts], [v for _, v in pts], label=name,
                                         color=style[p]["color"], marker=style[p]["marker"],
                                         linestyle=dashes[k % len(dashes)], linewidth=1.8, markersize=5)
        ax.axhline(1.0, color="black", linewidth=0.8)
        return xs, lines

    _grid_plot(doc, path, draw, "speedup (peer time / Cortex time)",
               "Speedup of " + ", ".join(targets) + " over each peer (above 1: Cortex is faster)")


# ------------------------------------------------------------------ text


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _load(values: list[float] | None) -> str:
    return "(unknown)" if not values else ", ".join(f"{v:.1f}" for v in values)


def results_table(doc: dict[str, Any], markdown: bool) -> str:
    """Per point: every contender's median (ms, with the relative p10-p90 spread), every
    target's speedup over each peer and its GFLOP/s (with the share of the roof, when measured)."""
    targets, peers = contenders(doc)
    roof = (doc.get("roof") or {}).get("gflops_median")
    head = ["model", "hidden", "tokens", "batch"] + [f"{n} ms" for n in targets + peers]
    head += [f"{t}/{p}" for t in targets for p in peers]
    head += [f"{t} GFLOP/s" + (" (roof)" if roof else "") for t in targets]
    rows = []
    for s in doc["summary"]:
        recs = {r["name"]: r for r in doc["results"]
                if (r["model"], r["hidden"], r["tokens"], r["batch"]) == (s["model"], s["hidden"], s["tokens"], s["batch"])}
        hidden = next((r["model_hidden"] for r in recs.values()), s["hidden"])
        row = [s["model"], str(hidden), str(s["tokens"]), str(s["batch"])]
        for n in targets + peers:
            r = recs.get(n)
            if r is None:
                row.append("")
            elif "median_ms" in r:
                row.append(f"{_ms(r['median_ms'])} ±{r['spread'] * 50:.0f}%")
            else:
                row.append(r["status"])
        for t in targets:
            sp = s["targets"].get(t, {}).get("speedup_vs_peer", {})
            for p in peers:
                row.append(f"{sp[p]:.2f}x" if p in sp else "")
        for t in targets:
            g, frac = s["targets"].get(t, {}).get("gflops"), s["targets"].get(t, {}).get("roof_fraction")
            row.append("" if g is None else f"{g:.1f}" + (f" ({frac:.0%})" if frac is not None else ""))
        rows.append(row)
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(r, widths)) for r in [head, *rows])


def markdown(doc: dict[str, Any], images: list[str]) -> str:
    h, s, v = doc["host"], doc["settings"], doc["versions"]
    lines = [f"# Cortex benchmark, {doc['created_utc']}", "",
             f"Command: `{' '.join(doc['command'])}` ({doc['duration_s']} s"
             + (", quick smoke run" if doc["quick"] else "") + ")", "",
             f"Host: {h['cpu']}, {h['usable_cpus']} usable of {h['logical_cpus']} logical CPUs, "
             f"{h['memory_gib']} GiB, {h['platform']}, Python {h['python']}; load average "
             f"{_load(h['loadavg_at_start'])} at the start, {_load(h['loadavg_at_end'])} at the end "
             "(1, 5, 15 minutes); "
             f"commit {h['git_commit']}.", "",
             "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".", "",
             f"Fairness ({doc['fairness']['isolation']}): {doc['fairness']['method']}.", "",
             f"Sweep ({s['sweep']}): models {', '.join(s['models'])}; batch {s['batches']}, "
             f"tokens {s['tokens']}, hidden {s['hiddens']} around the base point {s['base']}; "
             f"{s['rounds']} interleaved rounds of >= {s['timing']['min_reps']} calls and "
             f">= {s['timing']['min_time_s']} s per case; threads: {s['threads'] or 'every usable CPU'}. "
             "Times are medians over all rounds; ± is half the p10-p90 spread relative to the "
             "median; `T/P` is peer P's median over target T's (above 1: Cortex is faster).", ""]
    roof = doc.get("roof")
    if roof and roof.get("gflops_median"):
        lines += [f"Roof: a {roof['size']}^3 float32 NumPy matrix product, "
                  f"{roof['gflops_median']:.1f} GFLOP/s (median of {len(roof['gflops_rounds'])} rounds, "
                  f"{min(roof['gflops_rounds']):.1f}-{max(roof['gflops_rounds']):.1f}); GFLOP/s count the "
                  "model's equations (`flop_formula`), '(roof)' is the share of the roof.", ""]
    lines += [f"![{Path(i).stem}]({i})" for i in images]
    lines += ["", results_table(doc, markdown=True), ""]
    bad = [r for r in doc["results"] if r["status"] != "ok"]
    if bad:
        lines += ["Not timed:", ""]
        seen = set()
        for r in bad:
            key = (r["model"], r["name"], r["status"], r["reason"])
            if key not in seen:
                seen.add(key)
                lines.append(f"* {r['model']} {r['kind']} `{r['name']}`: {r['status']}: {r['reason']}")
        lines.append("")
    for c in doc["compile"]:
        if c["status"] == "ok":
            lines.append(f"* compile {c['model']} h{c['hidden']} for {c['target']}: "
                         f"{c['compile_s']:.2f} s, params {c.get('param_mib')} MiB")
    lines += ["", *[f"Note: {n}." for n in doc["notes"]], ""]
    return "\n".join(lines)


def write_report(doc: dict[str, Any], out: Path, plots: bool = True) -> Written:
    """Write ``report.md`` (and with ``plots`` the PNGs, when matplotlib is installed)."""
    out.mkdir(parents=True, exist_ok=True)
    w = Written(table=results_table(doc, markdown=False))
    images: list[str] = []
    if plots and have_matplotlib():
        for name, fn in (("latency.png", plot_latency), ("speedup.png", plot_speedup)):
            fn(doc, out / name)
            images.append(name)
            w.files.append(out / name)
    elif plots:
        w.messages.append(f"matplotlib is not installed: no plots ({pip_install('bench')}, "
                          f"then: python -m cortex.bench.report {out / 'bench.json'})")
    (out / "report.md").write_text(markdown(doc, images), encoding="utf-8")
    w.files.append(out / "report.md")
    w.messages.append("wrote " + ", ".join(str(f) for f in w.files))
    return w


def main(argv: list[str] | None = None) -> int:
    import json

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m cortex.bench.report bench.json [OUT_DIR]", file=sys.stderr)
        return 2
    src = Path(args[0])
    doc = json.loads(src.read_text(encoding="utf-8"))
    w = write_report(doc, Path(args[1]) if len(args) == 2 else src.parent)
    print("\n".join(w.messages), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
