"""How late the second work-group of an OpenCL launch starts: the measure that decides whether
tree groups (docs/opencl.md, "Tree groups") can use a second core.

A launch of two work-groups (one work-item each) where each group raises its flag and then
spins, for at most ``--spins`` reads, until it sees the other group's flag, and records how many
reads that took. Where the driver runs the two groups at once, the first group's count is the
other group's start delay (in reads; one read's time is measured with a one-group launch and the
delay printed in microseconds). Where the second group starts only after the first one ends
(one worker thread ran both, or the second worker woke too late), the first group gives up
(delay "never"). Each case runs ``--reps`` times: the two-group launch alone, and right after a
launch of two work-groups (as a call's leaf launch precedes the tree-group kernel). The spin is
bounded, so nothing waits forever (OpenCL does not promise that two groups run at once).

Usage::

    python tools/opencl_group_start.py                 # the first device (PYOPENCL_CTX)
    POCL_AFFINITY=1 python tools/opencl_group_start.py --out start.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

SOURCE = """
__kernel void spin(volatile __global int *flags, __global int *waited, int spins) {
  int g = get_group_id(0), other = 1 - g, n = 0;
  flags[g] = 1;
  while (n < spins && !flags[other]) ++n;
  waited[g] = flags[other] ? n : -1;
}
__kernel void before(__global float *x, int n) {
  for (int i = get_global_id(0); i < n; i += get_global_size(0)) x[i] = x[i] * 0.5f + 1.0f;
}
"""


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import pyopencl as cl

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--spins", type=int, default=20_000_000, help="most flag reads a group waits")
    ap.add_argument("--out", default="", help="also write the numbers as JSON here")
    a = ap.parse_args(argv)

    ctx = cl.create_some_context(interactive=False)
    queue = cl.CommandQueue(ctx)
    program = cl.Program(ctx, SOURCE).build()
    spin, before = cl.Kernel(program, "spin"), cl.Kernel(program, "before")
    mf = cl.mem_flags
    data = cl.Buffer(ctx, mf.READ_WRITE, 4 << 20)
    waited_host = np.zeros(2, np.int32)
    waited = cl.Buffer(ctx, mf.READ_WRITE, waited_host.nbytes)

    def launch(groups: int, preceded: bool) -> list[int]:
        # with one group the other flag stays 0: the group spins to the end (the calibration)
        flags = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.zeros(2, np.int32))
        queue.finish()
        if preceded:
            before(queue, (32,), (16,), data, np.int32(1 << 20))
        spin(queue, (groups,), (1,), flags, waited, np.int32(a.spins))
        cl.enqueue_copy(queue, waited_host, waited)
        queue.finish()
        return waited_host[:groups].tolist()

    launch(1, False)  # build for this size
    t = time.perf_counter()
    launch(1, False)
    read_ns = (time.perf_counter() - t) * 1e9 / a.spins
    result = {"device": queue.device.name.strip(), "read_ns": round(read_ns, 3), "cases": {}}
    print(f"{result['device']}: one flag read ~{read_ns:.2f} ns")
    for preceded in (False, True):
        delays = []
        for _ in range(a.reps):
            w = launch(2, preceded)  # the group that started first waited for the other
            delays.append(None if min(w) < 0 else round(max(w) * read_ns / 1000, 1))
        started = [d for d in delays if d is not None]
        name = "after a two-group launch" if preceded else "alone"
        result["cases"][name] = {"delays_us": delays}
        print(f"{name}: the second group started within the first one's wait in {len(started)}/{a.reps} "
              f"launches; its start delay median {statistics.median(started) if started else float('nan'):.1f} us, "
              f"max {max(started) if started else float('nan'):.1f} us")
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
