"""A CUDA :class:`Driver` without a GPU, for testing the runtime's host logic.

Device memory is host bytes; a launch runs the launched kernel of the program on the LoopProgram
interpreter over that memory (outputs written in place), so a whole ``CompiledProgram.run`` —
uploads, host steps, argument order, per-level launches, downloads — can be checked against
``interpret.run`` of the whole program. Every launch is recorded with its configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from cortex.core import loopir as ir
from cortex.core.loopir import interpret
from cortex.core.render.c_family import kernel_symbol
from cortex.plugins.cuda.device import DeviceInfo, nominal_device
from cortex.plugins.cuda.driver import Driver


class FakeAllocation:
    _next = 0x10000

    def __init__(self, nbytes: int) -> None:
        self.bytes = np.zeros(nbytes, np.uint8)
        self.address = FakeAllocation._next
        FakeAllocation._next += (nbytes + 255) // 256 * 256 + 256

    def __int__(self) -> int:
        return self.address


@dataclass
class Launched:
    symbol: str
    grid: int
    block: int
    shared_bytes: int
    cooperative: bool
    args: tuple


class FakeDriver(Driver):
    """``programs``: the LoopPrograms whose cubins will be loaded (matched by kernel symbol);
    ``per_sm``: the occupancy every kernel reports."""

    def __init__(self, programs: Sequence[ir.Program], info: DeviceInfo | None = None, per_sm: int = 2,
                 execute: bool = True) -> None:
        self.info = info or nominal_device("sm_90")
        self.per_sm = per_sm
        self.execute = execute
        self.kernels = {kernel_symbol(p, k.name): (p, k.name) for p in programs for k in p.kernels}
        self.launched: list[Launched] = []
        self.dynamic_shared: dict[str, int] = {}
        self.allocations: dict[int, FakeAllocation] = {}
        self.modules = 0
        self.syncs = 0
        self.uploads = 0
        self.staging_sizes: list[int] = []

    def load_module(self, image: bytes) -> Any:
        assert isinstance(image, bytes) and image, "a cubin image"
        self.modules += 1
        return image

    def function(self, module: Any, symbol: str) -> Any:
        if symbol not in self.kernels:
            raise KeyError(f"no kernel {symbol} in the fake's programs")
        return symbol

    def resident_blocks(self, function: Any, block: int, shared_bytes: int) -> int:
        return self.per_sm

    def allow_dynamic_shared(self, function: Any, nbytes: int) -> None:
        self.dynamic_shared[function] = nbytes

    def alloc(self, nbytes: int) -> FakeAllocation:
        a = FakeAllocation(nbytes)
        self.allocations[a.address] = a
        return a

    def memory(self, address: int, nbytes: int) -> np.ndarray:
        """The ``nbytes`` bytes at device ``address`` (inside one allocation, or an error)."""
        for base, a in self.allocations.items():
            if base <= address and address + nbytes <= base + a.bytes.size:
                return a.bytes[address - base: address - base + nbytes]
        raise AssertionError(f"device access [{address:#x}, +{nbytes}) outside every allocation")

    def host_buffer(self, nbytes: int) -> np.ndarray:
        self.staging_sizes.append(nbytes)
        return np.empty(nbytes, np.uint8)

    def upload(self, dst: int, array: np.ndarray) -> None:
        self.uploads += 1
        self.memory(int(dst), array.nbytes)[:] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)

    def download(self, out: np.ndarray, src: int) -> None:
        out.reshape(-1).view(np.uint8)[:] = self.memory(int(src), out.nbytes)

    def launch(self, function: Any, grid: int, block: int, shared_bytes: int,
               args: Sequence[tuple[str, Any]], cooperative: bool) -> None:
        assert grid >= 1 and block >= 1
        self.launched.append(Launched(function, grid, block, shared_bytes, cooperative, tuple(args)))
        if not self.execute:
            return
        program, kernel = self.kernels[function]
        nb, ns = len(program.buffers), len(program.sizes)
        kinds = [k for k, _ in args]
        assert kinds[:nb] == ["ptr"] * nb and all(k == "i32" for k in kinds[nb:]), kinds
        sizes = {s.name: int(v) for s, (_, v) in zip(program.sizes, args[nb:nb + ns])}
        params = tuple(int(v) for _, v in args[nb + ns:])
        assert len(params) == len(program.kernel(kernel).params)
        arrays = {}
        for b, (_, address) in zip(program.buffers, args[:nb]):
            shape = interpret.eval_shape(b.shape, sizes)
            dt = np.dtype(interpret.np_dtype(b.dtype))
            n = int(np.prod(shape, dtype=np.int64))
            assert int(address) % dt.itemsize == 0, f"{b.name} misaligned"
            arrays[b.name] = self.memory(int(address), n * dt.itemsize).view(dt).reshape(shape)
        one = replace(program, host=(ir.Launch(kernel, tuple(ir.Const(p) for p in params)),))
        interpret.run(one, arrays, sizes)  # outputs/temps are written in place (views of the fake memory)

    def synchronize(self) -> None:
        self.syncs += 1
