"""What a CUDA GPU offers, and the :class:`Capabilities` the core schedules against.

Pipeline position: beside the backend factory (``target.create_backend``). With a GPU, the
driver fills a :class:`DeviceInfo` from the device's attributes (``driver.py``); without one
(compile-only: nvcc but no driver), :func:`nominal_device` gives the published figures of the
architecture being compiled for, so schedules and sources are the ones that GPU would get.
:func:`capabilities` turns either into the core's :class:`Capabilities`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cortex.core.plugin import hostinfo
from cortex.core.plugin.capabilities import Capabilities

#: The architecture compiled for when ``arch='auto'`` and no GPU is visible (H100/H200).
FALLBACK_ARCH = "sm_90"

_ARCH = re.compile(r"^sm_(\d+)(\d)([a-z]?)$")


@dataclass(frozen=True)
class DeviceInfo:
    """The attributes of one CUDA device that code generation and launches depend on."""

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    shared_per_block: int = 48 * 1024  # without opting in
    shared_per_block_optin: int = 48 * 1024  # the most a kernel may raise its dynamic share to
    shared_per_sm: int = 64 * 1024
    l2_bytes: int = 0
    cooperative_launch: bool = True
    nominal: bool = False  # True: published figures for an arch, no device was queried

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


# Published per-architecture figures (CUDA C Programming Guide, "Compute capabilities"):
# (SMs of the flagship part, threads/SM, shared memory per block opt-in, shared memory per SM, L2).
_NOMINAL: dict[tuple[int, int], tuple[str, int, int, int, int, int]] = {
    (7, 0): ("Tesla V100 (nominal)", 80, 2048, 96 * 1024, 96 * 1024, 6 << 20),
    (7, 5): ("Tesla T4 (nominal)", 40, 1024, 64 * 1024, 64 * 1024, 4 << 20),
    (8, 0): ("A100 (nominal)", 108, 2048, 163 * 1024, 164 * 1024, 40 << 20),
    (8, 6): ("RTX 30xx (nominal)", 84, 1536, 99 * 1024, 100 * 1024, 6 << 20),
    (8, 9): ("L40 (nominal)", 142, 1536, 99 * 1024, 100 * 1024, 96 << 20),
    (9, 0): ("H100/H200 (nominal)", 132, 2048, 227 * 1024, 228 * 1024, 50 << 20),
    (10, 0): ("B200 (nominal)", 148, 2048, 227 * 1024, 228 * 1024, 126 << 20),
    (12, 0): ("RTX 50xx (nominal)", 170, 1536, 99 * 1024, 100 * 1024, 96 << 20),
}


def parse_arch(arch: str) -> tuple[int, int]:
    """``'sm_90'`` -> ``(9, 0)``; ``'sm_120'`` -> ``(12, 0)``; ``'sm_90a'`` -> ``(9, 0)``."""
    m = _ARCH.match(arch)
    if not m:
        raise ValueError(f"{arch!r} is not a CUDA architecture name such as 'sm_90'")
    return int(m.group(1)), int(m.group(2))


def nominal_device(arch: str) -> DeviceInfo:
    """A :class:`DeviceInfo` from the published figures of ``arch`` (no GPU needed).

    Unknown architectures get the figures of the closest older one in the table."""
    cc = parse_arch(arch)
    known = [k for k in sorted(_NOMINAL) if k <= cc] or [min(_NOMINAL)]
    name, sms, threads_sm, optin, per_sm, l2 = _NOMINAL[known[-1]]
    return DeviceInfo(name=name, compute_capability=cc, sm_count=sms, max_threads_per_sm=threads_sm,
                      shared_per_block_optin=optin, shared_per_sm=per_sm, l2_bytes=l2, nominal=True)


def capabilities(info: DeviceInfo, threads_per_block: int = 256) -> Capabilities:
    """The core's view of ``info``: a grid target with block barriers, a grid barrier when the
    device supports cooperative launches, shared memory up to the opt-in limit per block, and
    as many co-resident groups as ``threads_per_block``-thread blocks fill every SM."""
    per_sm = max(1, info.max_threads_per_sm // max(1, threads_per_block))
    return Capabilities(
        has_grid=True,
        grid_barrier=info.cooperative_launch,
        group_barrier=True,
        max_threads_per_group=info.max_threads_per_block,
        max_groups=info.sm_count * per_sm,
        warp_size=32,  # every CUDA architecture; __shfl_xor_sync exists from sm_30
        num_cores=hostinfo.cpu_count(),
        shared_memory_bytes=info.shared_per_block_optin,
        cache_bytes_per_core=0,
        vector_bits=0,
        supports_fp64=True,
        dialect="cuda",
        single_call=True,
    )
