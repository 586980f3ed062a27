"""A benchmark worker: one process that builds and times one contender at a time.

Pipeline position: outside the compiler pipeline, in ``cortex.bench``. The runner
(:mod:`cortex.bench.isolation`) starts ``python -m cortex.bench.worker`` once per contender and
talks to it over its stdin/stdout with pickled requests ``{"op": ..., **arguments}`` and replies
``{"ok": True, "value": ...}`` or ``{"ok": False, "error": ..., "traceback": ...}``. Anything a
library prints goes to stderr (the protocol owns the original stdout), which the runner keeps
in a log file and quotes when the worker dies.

Operations: ``hello`` (pid, thread pools), ``setup`` (build a contender for a group's points:
:func:`cortex.bench.contenders.build`), ``measure`` (time one point's call for one round),
``roof`` (time a float32 matrix product: :mod:`cortex.bench.roof`), ``drop`` (release the
group: executables closed, memory freed) and ``quit``.
:class:`Worker` is also used in the runner's own process for ``--isolation inprocess``.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import traceback
from typing import Any

from cortex.bench.contenders import Built, ContenderSpec, Point, build
from cortex.bench.timing import Timing, measure
from cortex.bench.workloads import GroupKey


class Worker:
    """The contender a worker holds, and the operations the runner asks of it."""

    def __init__(self) -> None:
        self.built: Built | None = None

    def hello(self) -> dict[str, Any]:
        from cortex.bench.environment import process_threads

        return process_threads()

    def setup(self, spec: ContenderSpec, group: GroupKey, points: list[Point]) -> dict[str, Any]:
        from cortex.bench.environment import process_threads

        self.drop()
        self.built = build(spec, group, points)
        b = self.built
        return {"status": b.status, "reason": b.reason, "info": b.info,
                "points": {p: {"status": r.status, "reason": r.reason, "roots": r.roots,
                               "info": r.info, "variants": [v for (q, v) in b.calls if q == p]}
                           for p, r in b.points.items()},
                "threads": process_threads()}

    def measure(self, point: Point, variant: str, timing: Timing) -> list[int]:
        if self.built is None or (point, variant) not in self.built.calls:
            raise KeyError(f"nothing to time for point {point} variant {variant!r}: set up first")
        return measure(self.built.calls[(point, variant)], timing)

    def roof(self, size: int, reps: int = 1) -> list[int]:
        from cortex.bench.roof import matmul_ns

        return matmul_ns(size, reps)

    def drop(self) -> None:
        if self.built is not None:
            self.built.close()
            self.built = None
        gc.collect()


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the runner dies, even while stopped (it may hold us stopped)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def main() -> int:
    _die_with_parent()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # C libraries and print() write to stderr from now on
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    worker = Worker()
    while True:
        try:
            msg = pickle.load(inp)
        except EOFError:
            return 0
        op = msg.pop("op")
        if op == "quit":
            worker.drop()
            return 0
        try:
            reply = {"ok": True, "value": getattr(worker, op)(**msg)}
        except Exception as exc:  # noqa: BLE001 - reported to the runner, which records it
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()}
        pickle.dump(reply, out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
