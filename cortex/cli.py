"""The ``cortex`` command (also ``python -m cortex``).

Pipeline position: outside the pipeline; it reports what the plugin system and the host offer.

``cortex info`` lists the plugins (version, source, hooks) and any plugin that failed, the
compile options every target accepts, every target with its aliases, own options, *enabled*
and *runnable* states and their reasons, the host (CPU and SIMD features, OpenCL devices, nvcc,
GPU) and the plugin environment switches. ``cortex info --json`` prints the same as JSON.
``cortex demo`` runs the zoo's TreeLSTM on a target (``cortex.plugins.cpu_llvm.demo``).
``cortex cache`` shows the compile cache (``cortex.core.diskcache``: its directory and each
namespace's entries); ``--clear`` empties it. ``cortex run`` runs a model over a corpus on Ray
(``cortex/distributed/command.py``, ``docs/distributed.md``).
``cortex tune`` tunes a model's schedule and manages the tuning records (``cortex.tuning.cli``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence


#: What each shared compile option defaults to, in words (``cortex.core.pipeline.CompileOptions``).
SHARED_DEFAULTS = {
    "dtype": "the model's dtype",
    "schedule": "the target's default schedule",
    "dump": "none",
    "passes": "cortex.core.passes.pipeline.DEFAULT_PASSES",
    "max_table_mib": "128 on CPU targets, 64 on a device",
    "check_finite": "False",
    "weights": "the compute dtype",
}


def shared_options() -> list[dict[str, str]]:
    """The options every target accepts (``cortex.core.pipeline.SHARED_OPTIONS``), with their
    defaults and allowed values."""
    from cortex.core import pipeline

    allowed = getattr(pipeline, "_ALLOWED", {})  # the words compile-option errors use
    return [{"name": name, "default": SHARED_DEFAULTS.get(name, "none"),
             "allowed": allowed.get(name, "see cortex.core.pipeline")}
            for name in pipeline.SHARED_OPTIONS]


def collect_info() -> dict[str, Any]:
    """Everything ``cortex info`` shows, as plain data."""
    from cortex import __version__
    from cortex.core.plugin import hostinfo
    from cortex.core.plugin.loader import ENV_SWITCHES, get_plugin_system

    system = get_plugin_system()
    registry = system.registry
    targets = []
    for target in registry:
        enabled = target.enabled()
        runnable = target.runnable()
        targets.append({
            "name": target.name,
            "aliases": list(target.aliases),
            "plugin": target.plugin,
            "description": target.description,
            "enabled": enabled.ok,
            "enabled_reason": enabled.reason,
            "enabled_fix": enabled.fix,
            "runnable": runnable.ok,
            "runnable_reason": runnable.reason,
            "runnable_fix": runnable.fix,
            "options": [
                {"name": o.name, "default": o.default, "allowed": o.describe_allowed(),
                 "help": o.help}
                for o in target.options
            ],
        })
    return {
        "cortex": __version__,
        "plugins": [
            {"name": p.name, "source": p.source, "module": p.module, "version": p.version,
             "hooks": list(p.hooks)}
            for p in system.plugins()
        ],
        "plugin_failures": [
            {"name": f.name, "source": f.source, "stage": f.stage, "error": f.error}
            for f in system.failures
        ],
        "plugins_skipped": [{"name": n, "why": why} for n, why in system.skipped],
        "plugin_environment": system.environment_info(),
        "shared_options": shared_options(),
        "targets": targets,
        "host": hostinfo.summary(),
        "switches": {name: os.environ.get(name, "") for name in ENV_SWITCHES},
    }


def _mark(ok: bool) -> str:
    return "yes" if ok else "NO "


def format_info(info: dict[str, Any]) -> str:
    """``collect_info()``'s data as the text ``cortex info`` prints."""
    lines = [f"Cortex {info['cortex']}", "", "Plugins:"]
    for p in info["plugins"]:
        hooks = ", ".join(p["hooks"]) or "no hooks"
        lines.append(f"  {p['name']} {p['version'] or '(no version)'}  [{p['source']}: "
                     f"{p['module']}]  hooks: {hooks}")
        for label, value in info["plugin_environment"].get(p["name"], {}).items():
            lines.append(f"      {label}: {value}")
    for f in info["plugin_failures"]:
        lines.append(f"  FAILED {f['name']} [{f['source']}] at {f['stage']}: {f['error']}")
    for s in info["plugins_skipped"]:
        lines.append(f"  skipped {s['name']}: {s['why']}")
    lines += ["", "Shared options (every target): cortex.compile(model, target=..., OPTION=value)"]
    for o in info["shared_options"]:
        lines.append(f"  option {o['name']} (default: {o['default']}): {o['allowed']}")
    lines += ["", "Targets:"]
    for t in info["targets"]:
        aliases = f" (alias {', '.join(t['aliases'])})" if t["aliases"] else ""
        lines.append(f"  {t['name']}{aliases} — {t['description']}  [plugin {t['plugin']}]")
        for state in ("enabled", "runnable"):
            text = f"    {state + ':':9} {_mark(t[state])}  {t[state + '_reason']}"
            if not t[state] and t[state + "_fix"]:
                text += f"  → fix: {t[state + '_fix']}"
            lines.append(text)
        for o in t["options"]:
            about = f" — {o['help']}" if o["help"] else ""
            lines.append(f"    option {o['name']}={o['default']!r}: {o['allowed']}{about}")
    if not info["targets"]:
        lines.append("  (none: no plugin registered a target)")
    lines += ["", "Host:"]
    lines += [f"  {label}: {value}" for label, value in info["host"].items()]
    lines += ["", "Plugin switches (environment):"]
    lines += [f"  {name}={value!r}" for name, value in info["switches"].items()]
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def format_cache(found: dict[str, Any]) -> str:
    """``cortex.core.diskcache.report()``'s data as the text ``cortex cache`` prints."""
    state = "on" if found["enabled"] else "off (CORTEX_CACHE=0)"
    lines = [f"Compile cache: {found['root']}  [{state}]"]
    if found["problem"]:
        lines.append(f"  refused: {found['problem']}")
    for name, n in found["namespaces"].items():
        removed = f", {n['removed']} removed" if n["removed"] else ""
        lines.append(f"  {name:8} {n['entries']:5d} entries  {n['bytes'] / 2**20:8.1f} MiB{removed}")
    if not found["namespaces"]:
        lines.append("  (empty)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from cortex import __version__

    parser = argparse.ArgumentParser(
        prog="cortex", description="Cortex: a compiler for recursive deep-learning models.")
    parser.add_argument("--version", action="version", version=f"cortex {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = commands.add_parser("info", help="plugins, targets (enabled/runnable) and the host")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    demo = commands.add_parser(
        "demo", help="the zoo's TreeLSTM on the bundled sentences: outputs and latency on a "
        "target next to the NumPy reference",
        description="Compile the zoo's TreeLSTM for a target and run it on the bundled example "
        "sentences, next to the NumPy reference. A target that cannot run here is an error "
        "(exit status 1); `cortex info` says what each target needs.")
    demo.add_argument("--target", default="llvm",
                      help="target to compile for (default: llvm; `cortex info` lists them)")
    demo.add_argument("--hidden", type=_positive_int, default=256, help="hidden size (default: 256)")
    demo.add_argument("-v", "--verbose", action="store_true", help="also print the schedule")
    bench = commands.add_parser("bench", help="benchmark: models x targets x installed peers, "
                                "timed fairly; JSON, report.md and plots (docs/bench.md)")
    from cortex.bench.options import add_arguments as add_bench_arguments

    add_bench_arguments(bench)
    cache = commands.add_parser("cache", help="the compile cache: where it is, what it holds")
    cache.add_argument("--clear", action="store_true", help="delete every entry")
    cache.add_argument("--json", action="store_true", help="print JSON instead of text")
    from cortex.tuning import cli as tune_cli

    tune_cli.add_parser(commands)

    from cortex.distributed.command import add_run_parser

    add_run_parser(commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "bench":
        from cortex.bench import main as bench_main
        from cortex.bench.options import from_args

        return bench_main(from_args(args))
    if args.command == "demo":
        from cortex.plugins.cpu_llvm.demo import DemoError, run_demo

        try:
            run_demo(target=args.target, hidden=args.hidden, verbose=args.verbose)
        except DemoError as exc:
            print(f"cortex demo: error: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "run":
        from cortex.distributed.command import run_command

        return run_command(args)
    if args.command == "cache":
        from cortex.core.diskcache import report

        found = report(clear=args.clear)
        print(json.dumps(found, indent=2) if args.json else format_cache(found))
        return 0
    if args.command == "tune":
        return tune_cli.run(args)
    data = collect_info()
    print(json.dumps(data, indent=2, default=repr) if args.json else format_info(data))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
