"""The `cortex` command and the host probes behind `cortex info`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from cortex import PluginWarning, cli
from cortex.core.plugin import hostinfo
from cortex.core.plugin.distribution import DISTRIBUTION

pytestmark = pytest.mark.usefixtures("clean_plugins")


def test_info_lists_every_target_with_states_reasons_and_the_host(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for line in ("llvm (alias cpu)", "opencl —", "cuda —", "numpy —", "Host:", "CPU:", "SIMD:",
                 "nvcc:", "OpenCL devices:", "GPU:", "CORTEX_DISABLE_PLUGINS="):
        assert line in out, line
    assert out.count("enabled:") == 4 and out.count("runnable:") == 4
    assert "cpu_llvm 0.1.0  [built-in: cortex.plugins.cpu_llvm]" in out
    assert "option threads=0: an integer >= 0" in out


def test_info_json_matches_the_registry(capsys, clean_plugins):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {t["name"]: t for t in data["targets"]}
    assert set(by_name) == {"llvm", "opencl", "cuda", "numpy"}
    registry = clean_plugins.get_registry()
    for name, entry in by_name.items():
        target = registry.get(name)
        enabled, runnable = target.enabled(), target.runnable()
        assert (entry["enabled"], entry["enabled_reason"]) == (enabled.ok, enabled.reason)
        assert (entry["runnable"], entry["runnable_reason"]) == (runnable.ok, runnable.reason)
        assert entry["runnable"] <= entry["enabled"]  # runnable implies enabled
        for state in ("enabled", "runnable"):
            assert entry[state + "_reason"]
            if not entry[state]:
                assert entry[state + "_fix"], (name, state)
    assert by_name["numpy"]["enabled"] and by_name["numpy"]["runnable"]
    assert {p["name"] for p in data["plugins"]} == {"cpu_llvm", "opencl", "cuda", "numpy_ref"}
    assert data["plugin_failures"] == []


def test_info_shows_failed_and_skipped_plugins(capsys, monkeypatch, make_distribution):
    make_distribution("cortex-broken", "0.1", "cortex_broken_plugin", "broken_plugin.py",
                      {"broken": "cortex_broken_plugin"})
    monkeypatch.setenv("CORTEX_DISABLE_PLUGINS", "cuda")
    with pytest.warns(PluginWarning):
        assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "FAILED broken [entry point] at import: ImportError: sample failure" in out
    assert "skipped cuda: disabled by CORTEX_DISABLE_PLUGINS" in out
    assert "cuda —" not in out and "CORTEX_DISABLE_PLUGINS='cuda'" in out


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "info" in capsys.readouterr().out


def test_python_dash_m_cortex_info_runs():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORTEX_")}
    out = subprocess.run([sys.executable, "-m", "cortex", "info"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Targets:" in out.stdout and "numpy —" in out.stdout


def test_console_script_points_at_the_cli():
    try:
        scripts = metadata.distribution(DISTRIBUTION).entry_points
    except metadata.PackageNotFoundError:
        pytest.skip(reason=f"{DISTRIBUTION} is not installed (pip install -e .), so no console script")
    (script,) = [ep for ep in scripts if ep.group == "console_scripts" and ep.name == "cortex"]
    assert script.value == "cortex.cli:main"


# -- host probes ----------------------------------------------------------------------------------

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Example CPU @ 2.00GHz
flags\t\t: fpu sse sse2 pni ssse3 avx avx2 fma avx512f avx512bw

processor\t: 1
model name\t: second processor is ignored
"""


def test_cpuinfo_parsing_and_simd_features(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    fields = hostinfo._cpuinfo(str(path))
    assert fields["model name"] == "Example CPU @ 2.00GHz"
    flags = frozenset(fields["flags"].split())
    assert hostinfo.simd_features(flags) == ["sse", "sse2", "sse3", "ssse3", "avx", "avx2", "fma",
                                             "avx512f", "avx512bw"]
    assert hostinfo._cpuinfo(str(tmp_path / "missing")) == {}


def test_this_hosts_cpu_is_described():
    assert hostinfo.cpu_name()
    assert hostinfo.cpu_count() >= 1
    if Path("/proc/cpuinfo").exists():
        assert hostinfo.cpu_flags()


def test_nvcc_is_found_and_its_version_parsed(tmp_path, monkeypatch):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    hostinfo.find_nvcc.cache_clear()
    hostinfo.nvcc_version.cache_clear()
    try:
        assert hostinfo.find_nvcc() == str(fake)
        assert hostinfo.nvcc_version() == "12.4 (V12.4.131)"
    finally:
        hostinfo.find_nvcc.cache_clear()
        hostinfo.nvcc_version.cache_clear()


def test_without_nvcc_the_cuda_target_is_not_enabled_and_says_why(tmp_path, monkeypatch,
                                                                   clean_plugins):
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # hide /usr/local/cuda/bin/nvcc
    hostinfo.find_nvcc.cache_clear()
    try:
        state = clean_plugins.get_registry().get("cuda").enabled()
    finally:
        hostinfo.find_nvcc.cache_clear()
    assert not state and "nvcc" in state.reason and "CUDA toolkit" in state.fix


def test_device_probes_report_instead_of_raising():
    driver = hostinfo.cuda_driver()
    assert bool(driver.error) != bool(driver.devices)
    cl = hostinfo.opencl_devices()
    assert bool(cl.error) != bool(cl.devices)
    summary = hostinfo.summary()
    assert set(summary) == {"platform", "CPU", "SIMD", "nvcc", "OpenCL devices", "GPU"}
