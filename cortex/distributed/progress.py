"""Progress of a distributed run, as the driver's committer sees rows arrive.

Pipeline position: called by :func:`cortex.distributed.job.run_inference` after each table it
writes. :class:`ProgressLine` prints ``rows done/total, rows/s, errors``: one line rewritten in
place on a terminal, a new line every ``every`` seconds otherwise (logs, CI).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Progress:
    """Where a run stands: rows written (repeats included, until the commit drops them), of
    ``total``; failed rows; seconds since the run started; ``done`` once committed."""

    rows: int
    total: int
    errors: int
    seconds: float
    done: bool = False


class ProgressLine:
    """Print :class:`Progress` updates to ``stream`` (stderr by default)."""

    def __init__(self, stream: TextIO | None = None, every: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every if every is not None else (0.2 if self.tty else 10.0)
        self._last = -float("inf")

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if not p.done and now - self._last < self.every:
            return
        self._last = now
        share = f" ({100 * p.rows / p.total:.0f}%)" if p.total else ""
        rate = p.rows / p.seconds if p.seconds > 0 else 0.0
        text = f"rows {p.rows}/{p.total}{share}  {rate:.0f} rows/s  errors {p.errors}"
        if self.tty:
            self.stream.write("\r" + text + ("\n" if p.done else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
