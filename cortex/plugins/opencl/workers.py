"""PoCL's worker threads pinned to cores (``POCL_AFFINITY``): set once per process, reported.

Pipeline position: process setup of the ``opencl`` plugin, before any OpenCL device is probed.
PoCL's CPU device starts one worker thread per compute unit when its devices are first listed
(``clGetDeviceIDs``: cortex's ``runnable`` check, ``cortex info`` or the first compile) and
reads ``POCL_AFFINITY`` then: with ``1`` worker ``i`` is pinned to core ``i``. An unpinned
worker sleeps between launches and took 0.6-20 ms to start a launch's second work-group
(docs/opencl.md, "Both cores"), longer than a small batch's kernel, so the first worker ran
both; pinned, the second group starts in time (tree groups 0.59-0.72x the time at b10 on a
quiet machine). On a shared machine a pinned worker cannot leave a core that another job holds
(1.33-1.51x the time at load ~4), so the user can say no: ``POCL_AFFINITY`` set in the
environment is never overridden.

What is in effect is a fact of the process, not of one compile: :func:`apply_default` (called
when the plugin registers its target, before anything probes a device) sets ``POCL_AFFINITY=1``
unless the user set it or PoCL is already loaded; :func:`note_probe` records the value PoCL
starts with, just before cortex first lists devices; :func:`pinning` tells a compile whether
its ``pin_workers`` request holds, and why not when it does not.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

ENV = "POCL_AFFINITY"
#: How to run a process whose PoCL workers are not pinned (or are): the user's own setting.
FIX = "set POCL_AFFINITY=0 (unpinned) or 1 (pinned) in the environment before the process starts"


@dataclass
class _Process:
    set_by_cortex: bool = False  # POCL_AFFINITY was set by apply_default, not by the user
    start_value: str | None = None  # POCL_AFFINITY when PoCL started, if cortex saw the start
    start_seen: bool = False


_PROCESS = _Process()


@dataclass(frozen=True)
class WorkerPinning:
    """Whether a compile's ``pin_workers`` request holds on its device, and why."""

    requested: bool
    in_effect: bool  # PoCL's workers are pinned one per compute unit
    reason: str

    @property
    def as_requested(self) -> bool:
        return self.requested == self.in_effect


def pocl_loaded() -> bool:
    """Whether PoCL's library is in the process already (it then may have started its
    workers). Without ``/proc`` (not Linux): whether pyopencl was imported."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return "libpocl" in maps.read()
    except OSError:
        return "pyopencl" in sys.modules


def apply_default(pin: bool = True) -> None:
    """Set ``POCL_AFFINITY`` to ``pin`` unless the user set it or PoCL is already loaded."""
    if ENV in os.environ or pocl_loaded():
        return
    os.environ[ENV] = "1" if pin else "0"
    _PROCESS.set_by_cortex = True


def note_probe(pin: bool | None = None) -> None:
    """Call just before cortex lists OpenCL devices: the first time, before PoCL is loaded,
    record the value its workers start with (``pin``, where given and the value is cortex's
    own, replaces cortex's default first)."""
    if _PROCESS.start_seen or pocl_loaded():
        return
    if pin is not None and (_PROCESS.set_by_cortex or ENV not in os.environ):
        os.environ[ENV] = "1" if pin else "0"
        _PROCESS.set_by_cortex = True
    _PROCESS.start_value = os.environ.get(ENV)
    _PROCESS.start_seen = True


def _origin(value: str | None) -> str:
    if value is None:
        return "POCL_AFFINITY unset"
    who = "cortex's default, the user had not set it" if _PROCESS.set_by_cortex else "the user's"
    return f"POCL_AFFINITY={value} ({who})"


def pinning(requested: bool, pthread_device: bool) -> WorkerPinning:
    """What holds for a compile asking ``pin_workers=requested`` on a device that is PoCL's
    CPU (pthread) device (``pthread_device``) or not."""
    if not pthread_device:
        return WorkerPinning(requested, False, "not PoCL's CPU device: POCL_AFFINITY does not apply")
    if _PROCESS.start_seen:
        value = _PROCESS.start_value
        when = f"PoCL started its workers in this process with {_origin(value)}"
    else:
        value = os.environ.get(ENV)
        when = (f"PoCL was loaded before cortex first looked, so its start value is assumed to be "
                f"the environment's now, {_origin(value)}")
    pinned = (value or "0").strip() == "1"
    reason = f"{when}: workers {'pinned one per core' if pinned else 'not pinned'}"
    if pinned != requested:
        reason += f"; pin_workers={requested} is not in effect ({FIX})"
    return WorkerPinning(requested, pinned, reason)
