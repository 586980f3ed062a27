"""Registration and honest availability of the four built-in targets.

Test ids carry the target name, so one backend's tests run alone with ``-k llvm`` (tox does).
``CORTEX_TEST_REQUIRE=llvm,opencl`` turns "this target is usable here" from an observation into
a requirement: CI sets it for the backends it installs, so a broken install fails loudly
instead of quietly reporting the target as disabled.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from cortex.core.plugin import hostinfo
from cortex.core.plugin.distribution import pip_install

pytestmark = pytest.mark.usefixtures("clean_plugins")

PLUGIN_OF = {"llvm": "cpu_llvm", "opencl": "opencl", "cuda": "cuda", "numpy": "numpy_ref"}
REQUIRED = {n.strip() for n in os.environ.get("CORTEX_TEST_REQUIRE", "").split(",") if n.strip()}


def expected_enabled(name: str) -> bool:
    """Whether the target should be enabled, from the same facts a person would check."""
    return {
        "llvm": importlib.util.find_spec("llvmlite") is not None,
        "opencl": importlib.util.find_spec("pyopencl") is not None,
        "cuda": hostinfo.find_nvcc() is not None,
        "numpy": True,
    }[name]


@pytest.mark.parametrize("name", sorted(PLUGIN_OF))
def test_target_is_registered_by_its_plugin(clean_plugins, name):
    target = clean_plugins.get_registry().get(name)
    assert target.plugin == PLUGIN_OF[name]
    assert target.description
    assert target.resolve_options({}) == target.defaults()  # every default is itself valid


@pytest.mark.parametrize("name", sorted(PLUGIN_OF))
def test_enabled_state_matches_the_host_and_explains_itself(clean_plugins, name):
    state = clean_plugins.get_registry().get(name).enabled()
    assert state.ok == expected_enabled(name)
    assert state.reason
    if not state.ok:
        assert state.fix


@pytest.mark.parametrize("name", sorted(PLUGIN_OF))
def test_runnable_implies_enabled_and_explains_itself(clean_plugins, name):
    target = clean_plugins.get_registry().get(name)
    runnable = target.runnable()
    assert runnable.reason
    if runnable.ok:
        assert target.enabled().ok
    else:
        assert runnable.fix


@pytest.mark.parametrize("name", sorted(PLUGIN_OF))
def test_required_targets_are_enabled_and_runnable(clean_plugins, name):
    if name not in REQUIRED:
        pytest.skip(reason=f"CORTEX_TEST_REQUIRE does not name {name!r}")
    target = clean_plugins.get_registry().get(name)
    assert target.enabled().ok, target.enabled().describe()
    assert target.runnable().ok, target.runnable().describe()


def test_opencl_runnable_matches_the_devices_found(clean_plugins):
    state = clean_plugins.get_registry().get("opencl").runnable()
    if not expected_enabled("opencl"):
        assert not state.ok and "pyopencl" in state.reason
    else:
        assert state.ok == bool(hostinfo.opencl_devices().devices)


def test_cuda_runnable_needs_a_driver_and_pycuda(clean_plugins):
    state = clean_plugins.get_registry().get("cuda").runnable()
    driver = hostinfo.cuda_driver()
    has_pycuda = importlib.util.find_spec("pycuda") is not None
    assert state.ok == (expected_enabled("cuda") and not driver.error and has_pycuda)
    if expected_enabled("cuda") and driver.error:
        assert driver.error in state.reason
    if expected_enabled("cuda") and not has_pycuda:
        assert "pycuda is not installed" in state.reason and pip_install("cuda") in state.fix


@pytest.mark.parametrize("name, option, value", [
    ("llvm", "threads", -1), ("llvm", "opt_level", 4), ("llvm", "cpu", "two words"),
    ("opencl", "device", "gpu0"), ("opencl", "work_group_size", -2),
    ("cuda", "arch", "90"), ("cuda", "threads_per_block", 100), ("cuda", "device", -1),
    ("numpy", "dtype", "int8"),
])
def test_builtin_options_reject_bad_values(clean_plugins, name, option, value):
    from cortex import InvalidOptionError

    target = clean_plugins.get_registry().get(name)
    with pytest.raises(InvalidOptionError, match=f"{option}={value!r}"):
        target.resolve_options({option: value})


@pytest.mark.parametrize("name, options", [
    ("llvm", {"threads": 2, "opt_level": 0, "cpu": "skylake-avx512"}),
    ("opencl", {"device": "0:1", "work_group_size": 64}),
    ("opencl", {"device": "cpu"}),
    ("cuda", {"arch": "sm_90a", "threads_per_block": 1024, "device": 1}),
    ("numpy", {}),  # dtype is a shared compile option now (cortex/core/pipeline.py)
])
def test_builtin_options_accept_good_values(clean_plugins, name, options):
    target = clean_plugins.get_registry().get(name)
    assert target.resolve_options(options) == {**target.defaults(), **options}


class _FakeCL:
    """Just enough of pyopencl for the device probe: one platform, one CPU device, whose builds
    fail with ``log`` (or succeed when it is empty)."""

    class device_type:  # noqa: N801 (pyopencl's name)
        CPU, GPU, ACCELERATOR = 2, 4, 8

    def __init__(self, log: str) -> None:
        self.log = log
        fake = self

        class Program:
            def __init__(self, ctx, src):
                pass

            def build(self):
                if fake.log:
                    raise RuntimeError(fake.log)
                return self

        self.Program = Program
        self.Context = lambda devices: object()
        device = type("Device", (), {"name": "pthread-Some CPU ", "type": 2})()
        platform = type("Platform", (), {"name": "Portable Computing Language",
                                         "get_devices": lambda self: [device]})()
        self.get_platforms = lambda: [platform]
        self.__spec__ = importlib.util.spec_from_loader("pyopencl", loader=None)


def test_an_opencl_device_that_cannot_build_a_kernel_is_not_counted_and_says_why(monkeypatch):
    # a PoCL whose LLVM is older than the CPU lists the device, then fails every build
    fake = _FakeCL("clBuildProgram failed: BUILD_PROGRAM_FAILURE\nBuild on <Device>:\n"
                   "error: unknown target CPU 'generic'\nDevice pthread-Some CPU failed to build")
    monkeypatch.setitem(sys.modules, "pyopencl", fake)
    hostinfo.opencl_devices.cache_clear()
    try:
        found = hostinfo.opencl_devices()
        assert found.devices == ()
        assert found.unusable == tuple(found.error.split("; "))
        assert "pthread-Some CPU (CPU) cannot build a kernel: error: unknown target CPU 'generic'" in found.error
        assert "does not know this CPU" in found.error
        fake.log = ""
        hostinfo.opencl_devices.cache_clear()
        assert hostinfo.opencl_devices().devices == ("Portable Computing Language: pthread-Some CPU (CPU)",)
    finally:
        hostinfo.opencl_devices.cache_clear()


def test_pocl_names_the_cpu_it_compiles_for_in_its_version_string():
    from cortex.plugins.opencl.device import pocl_compile_cpu

    assert pocl_compile_cpu("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3") == "znver3"
    assert pocl_compile_cpu("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-x86-64-v3") == "x86-64-v3"
    assert pocl_compile_cpu("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-skylake-avx512") \
        == "skylake-avx512"
    assert pocl_compile_cpu("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-newcpu9") == ""
    assert pocl_compile_cpu("OpenCL 3.0 CUDA") == ""


def test_the_default_opencl_device_is_the_first_that_builds_a_kernel(monkeypatch):
    pytest.importorskip("pyopencl", reason="device selection imports pyopencl")
    from cortex.plugins.opencl import device

    found = [("0:0 Old PoCL: cpu (CPU)", "old"), ("1:0 Other PoCL: cpu (CPU)", "new")]
    monkeypatch.setattr(device, "list_devices", lambda: found)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    monkeypatch.setattr(device, "_builds", lambda label: label.startswith("1:0"))
    assert device.select_device("") == "new"
    assert device.select_device("0:0") == "old"  # asked for by index: that one, as asked
    monkeypatch.setattr(device, "_builds", lambda label: False)
    assert device.select_device("") == "old"  # none builds: the first (its build error then says why)
