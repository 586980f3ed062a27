"""Progress bars for long host-side work: corpus inference (``exe.map``) and token-table fills.

Pipeline position: beside the executable's calls; nothing in the compiled code reports
progress. :func:`bar` returns a :class:`Progress` drawn by tqdm when it is installed (the
``progress`` extra: ``pip install 'cortex-compiler[progress]'``), else by rich, else as plain lines
on stderr at most once a second (count, rate, and any extra figures such as nodes/s).
``CORTEX_PROGRESS=0`` turns every bar off; ``CORTEX_PROGRESS=plain`` forces plain lines.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

ENV = "CORTEX_PROGRESS"


def wanted(asked: bool | None = None) -> bool:
    """Whether to draw: ``asked`` when given, else unless ``CORTEX_PROGRESS=0``."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return False
    return True if asked is None else bool(asked)


class Progress:
    """A bar: :meth:`update` with how many more units are done (and extra figures to show);
    :meth:`close` (or leaving a ``with`` block) finishes it. The base class draws nothing."""

    def __init__(self, total: int | None, desc: str, unit: str) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = 0
        self.start = time.perf_counter()

    def update(self, n: int = 1, **figures: Any) -> None:
        self.n += n

    def close(self) -> None:
        pass

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Tqdm(Progress):
    def __init__(self, total: int | None, desc: str, unit: str) -> None:
        super().__init__(total, desc, unit)
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, leave=True)

    def update(self, n: int = 1, **figures: Any) -> None:
        super().update(n)
        if figures:
            self._bar.set_postfix(figures, refresh=False)
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


class _Rich(Progress):
    def __init__(self, total: int | None, desc: str, unit: str) -> None:
        super().__init__(total, desc, unit)
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                   TextColumn, TimeElapsedColumn)

        self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[rate]}"), transient=False)
        self._task = self._bar.add_task(desc, total=total, rate="")
        self._bar.start()

    def update(self, n: int = 1, **figures: Any) -> None:
        super().update(n)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = f"{self.n / elapsed:,.0f} {self.unit}/s " + " ".join(f"{k}={v}" for k, v in figures.items())
        self._bar.update(self._task, advance=n, rate=rate)

    def close(self) -> None:
        self._bar.stop()


class _Plain(Progress):
    """Lines on a stream, at most one a second, and one at the end."""

    def __init__(self, total: int | None, desc: str, unit: str, stream: TextIO | None = None,
                 every: float = 1.0) -> None:
        super().__init__(total, desc, unit)
        self._stream = stream if stream is not None else sys.stderr
        self._every = every
        self._last = self.start
        self._figures: dict[str, Any] = {}

    def _line(self) -> str:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        of = f"/{self.total}" if self.total else ""
        extra = "".join(f", {k} {v}" for k, v in self._figures.items())
        return f"{self.desc}: {self.n}{of} {self.unit} in {elapsed:.1f} s ({self.n / elapsed:,.0f} {self.unit}/s{extra})"

    def update(self, n: int = 1, **figures: Any) -> None:
        super().update(n)
        self._figures.update(figures)
        now = time.perf_counter()
        if now - self._last >= self._every:
            self._last = now
            print(self._line(), file=self._stream, flush=True)

    def close(self) -> None:
        print(self._line(), file=self._stream, flush=True)


def bar(total: int | None, desc: str, unit: str = "it", enabled: bool | None = None) -> Progress:
    """A progress bar (see the module docstring); a silent one when not :func:`wanted`."""
    if not wanted(enabled):
        return Progress(total, desc, unit)
    if os.environ.get(ENV, "").strip().lower() != "plain":
        for kind in (_Tqdm, _Rich):
            try:
                return kind(total, desc, unit)
            except ImportError:
                continue
    return _Plain(total, desc, unit)
