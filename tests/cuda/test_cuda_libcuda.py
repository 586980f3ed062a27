"""The driver API layer (``LibCuda``: ctypes signatures, kernel parameter passing, copies by
address, error messages) against a C stand-in for libcuda (``fake_libcuda.c``), built with the
host C compiler: no GPU needed."""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from cortex.plugins.cuda.driver import CudaError, LibCuda

CC = shutil.which("cc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc) on PATH")


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    out = tmp_path_factory.mktemp("libcuda") / "libfakecuda.so"
    src = pathlib.Path(__file__).with_name("fake_libcuda.c")
    r = subprocess.run([CC, "-shared", "-fPIC", "-O1", str(src), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return LibCuda(str(out)), ctypes.CDLL(str(out))


def value(lib: ctypes.CDLL, name: str, ctype=ctypes.c_int) -> int:
    return ctype.in_dll(lib, name).value


def test_device_attributes(fake):
    cuda, _ = fake
    info = cuda.device_info(0)
    assert (info.name, info.compute_capability, info.sm_count, info.arch) == ("Fake H200", (9, 0), 132, "sm_90")
    assert info.shared_per_block_optin == 232448 and info.cooperative_launch and not info.nominal
    with pytest.raises(CudaError, match=r"cuDeviceGet\(1\) failed: CUDA_ERROR_UNKNOWN \(101\)"):
        cuda.device_info(1)


def test_module_function_occupancy_and_attributes(fake):
    cuda, lib = fake
    module = cuda.load_module(b"\x7fELFcubin....")
    fn = cuda.function(module, "tree_lstm_main")
    assert cuda.resident_blocks(fn, 256, 0) == 3 and value(lib, "fake_occupancy_block") == 256
    assert cuda.resident_blocks(fn, 256, 200000) == 1
    cuda.allow_dynamic_shared(fn, 163840)
    assert value(lib, "fake_attr_set") == 8 * 1000000 + 163840


@pytest.mark.parametrize("cooperative", [True, False])
def test_launch_passes_pointers_and_ints_by_address(fake, cooperative):
    cuda, lib = fake
    fn = cuda.function(cuda.load_module(b"\x7fELFcubin...."), "k")
    before = value(lib, "fake_launches")
    cuda.launch(fn, 7, 128, 4096, [("ptr", 0x7F00DEADBEEF10), ("i32", -5)], cooperative)
    assert value(lib, "fake_launches") == before + 1
    assert (value(lib, "fake_grid"), value(lib, "fake_block"), value(lib, "fake_shared")) == (7, 128, 4096)
    assert value(lib, "fake_cooperative") == int(cooperative)
    assert value(lib, "fake_arg0", ctypes.c_uint64) == 0x7F00DEADBEEF10
    assert value(lib, "fake_arg1", ctypes.c_int32) == -5


def test_copies_by_address_and_errors_name_the_call(fake):
    cuda, _ = fake
    device = np.zeros(6, np.float32)  # the stand-in's "device memory" is host memory
    cuda.upload(device.ctypes.data, np.arange(6, dtype=np.float32))
    back = np.empty(6, np.float32)
    cuda.download(back, device.ctypes.data)
    np.testing.assert_array_equal(back, np.arange(6))
    cuda.synchronize()
    with pytest.raises(CudaError, match=r"cuCtxSynchronize \(a kernel failed\) failed: "
                                        r"CUDA_ERROR_ILLEGAL_ADDRESS \(700\): an illegal memory access"):
        cuda.synchronize()
