"""Where the time of one ``opencl`` call goes: host work before the first launch, each kernel
launch's device time, and the rest (the upload, waiting, the read-back and the outputs).

Compiles a zoo model (``cortex.bench.workloads``: the benchmark's sizes and inputs) for target
``opencl`` and runs it on one prelinearized batch ``--reps`` times with the device's queue
swapped for a profiling queue (the same device and context; the original queue is put back at
the end). For the median call it prints the wall time, the host time from the call to the first
kernel enqueue, the summed device time of the launches (profiling events, start to end) and
the span from the first launch's queueing to the last one's end; then each launch's median
device time, work-groups and work-items. ``--form`` forces ``single_group`` or ``per_level``.

On Linux it also says how the call's work was shared among the process's other threads (the
driver's workers; ``/proc/self/task/*/schedstat``, CPU time per thread and call): the second
busiest thread's share of the two busiest threads' time (median over calls) and the fraction of
calls where it did over 30%. A launch of two work-groups (``--options '{"tree_groups": 2}'``)
that both cores run has a share near 0.5; near 0, one worker ran both.

Usage::

    python tools/opencl_profile.py --model TreeFC --batch 1
    python tools/opencl_profile.py --model MVRNN --batch 10 --form per_level --out prof.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    import pyopencl as cl

    import cortex
    from cortex.bench.workloads import GroupKey, build_model, make_inputs, model_spec

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="TreeLSTM")
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--form", default="auto", choices=("auto", "single_group", "per_level"))
    ap.add_argument("--schedule", default="", help="JSON of schedule knobs over the default rules")
    ap.add_argument("--options", default="", help="JSON of other cortex.compile options (e.g. tree_groups)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default="", help="also write the numbers as JSON here")
    a = ap.parse_args(argv)

    model = build_model(GroupKey(a.model, a.hidden, None, 20000, 0))
    width = model.params["U"].shape[1] if a.model == "DAGRNN" else model_spec(a.model).hidden(a.hidden)
    exe = cortex.compile(model, target="opencl", form=a.form,
                         schedule=json.loads(a.schedule) if a.schedule else None,
                         **(json.loads(a.options) if a.options else {}))
    batch = exe.linearize(make_inputs(a.model, a.tokens, a.batch, vocab=20000, width=width, seed=0).structures)
    device = exe.artifact.device
    original = device.queue
    device.queue = cl.CommandQueue(device.context, device.device,
                                   properties=cl.command_queue_properties.PROFILING_ENABLE)
    enqueue = cl.enqueue_nd_range_kernel
    launched: list[tuple[str, int, int, float, object]] = []

    def recording(queue, kernel, global_size, local_size, *args, **kw):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        event = enqueue(queue, kernel, global_size, local_size, *args, **kw)
        launched.append((kernel.function_name, global_size[0] // local_size[0], local_size[0], t, event))
        return event

    calls = []
    try:
        for _ in range(3):
            exe.run(batch)  # warm: kernels built for their sizes, pools allocated
        cl.enqueue_nd_range_kernel = recording
        for _ in range(a.reps):
            launched.clear()
            before = _thread_times()
            start = time.perf_counter()
            exe.run(batch)
            wall = time.perf_counter() - start
            after = _thread_times()
            events = [e for *_, e in launched]
            calls.append({
                "wall_us": wall * 1e6,
                "host_before_first_launch_us": (launched[0][3] - start) * 1e6,
                "kernels_us": sum(e.profile.end - e.profile.start for e in events) * 1e-3,
                "queued_to_end_us": (events[-1].profile.end - events[0].profile.queued) * 1e-3,
                "launches": [(n, g, w, (e.profile.end - e.profile.start) * 1e-3) for n, g, w, _, e in launched],
                "second_worker_share": _second_share(before, after),
            })
    finally:
        cl.enqueue_nd_range_kernel = enqueue
        device.queue = original
    calls.sort(key=lambda c: c["wall_us"])
    median = calls[len(calls) // 2]
    per_launch = [(n, g, w, statistics.median(c["launches"][i][3] for c in calls
                                              if len(c["launches"]) > i))
                  for i, (n, g, w, _) in enumerate(median["launches"])]
    summary = {k: round(median[k], 1) for k in
               ("wall_us", "host_before_first_launch_us", "kernels_us", "queued_to_end_us")}
    print(f"{a.model} b{a.batch} ({batch.num_nodes} nodes), form {exe.artifact.last_form}: "
          + ", ".join(f"{k} {v}" for k, v in summary.items()))
    shares = [c["second_worker_share"] for c in calls if c["second_worker_share"] is not None]
    if shares:
        summary["second_worker_share"] = round(statistics.median(shares), 2)
        summary["calls_shared_over_30pct"] = round(sum(x > 0.3 for x in shares) / len(shares), 2)
        print(f"  workers: second busiest thread's share {summary['second_worker_share']} (median), "
              f"over 30% in {summary['calls_shared_over_30pct']:.0%} of calls")
    for n, g, w, us in per_launch:
        print(f"  {n:32s} {g:6d} groups x {w:4d} items  {us:9.1f} us")
    if a.out:
        Path(a.out).write_text(json.dumps({"model": a.model, "batch": a.batch, "tokens": a.tokens,
                                           "hidden": a.hidden, "form": exe.artifact.last_form,
                                           "median_call": summary, "launches": per_launch}, indent=1))


def _thread_times() -> dict[str, int]:
    """CPU time (ns) of each thread of this process but the main one; {} where unreadable."""
    import os

    out = {}
    try:
        for t in os.listdir("/proc/self/task"):
            if t != str(os.getpid()):
                with open(f"/proc/self/task/{t}/schedstat") as f:
                    out[t] = int(f.read().split()[0])
    except OSError:
        return {}
    return out


def _second_share(before: dict[str, int], after: dict[str, int]) -> float | None:
    """The second busiest thread's share of the two busiest threads' time between two readings."""
    spent = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
    if len(spent) < 2 or spent[0] + spent[1] <= 0:
        return None
    return spent[1] / (spent[0] + spent[1])


if __name__ == "__main__":
    main()
