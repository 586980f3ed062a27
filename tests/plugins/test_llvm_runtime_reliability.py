"""The ``llvm`` runtime under hostile conditions: threads the system refuses, a huge
``ulimit -s``, idle executables, executables dropped by the hundred, Ctrl-C in a long call.

Each scenario that could crash or hang the interpreter runs in a subprocess with a timeout and
reports JSON on its last line. Timing figures are only compared with generous bounds that tell
a hang or a spinning thread from normal behaviour.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("llvmlite", reason="the llvm target needs llvmlite")

import cortex  # noqa: E402
from cortex.models import TreeFC  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux")


def _threads() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


def run_script(code: str, timeout: float, env: dict | None = None, preexec=None, prelude: str = "") -> dict:
    """Run ``prelude`` then ``code`` (dedented) in a fresh interpreter; its last stdout line is
    JSON."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=full_env, preexec_fn=preexec, cwd=ROOT)
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}\n" \
                                 f"--- stderr ---\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


TINY = """
import json, warnings, numpy as np, cortex
from cortex.models import TreeFC
model = TreeFC(hidden=8, embed=8, vocab=10, seed=0)
trees = [((1, 2), 3), (4, (5, (6, 7)))]
want = cortex.compile(model, target="numpy")(trees).root("h")
"""


# ------------------------------------------------------------------ threads the system refuses

def test_refused_threads_fall_back_to_a_smaller_team_with_a_warning():
    """pthread_create fails (here: a stack no system can reserve): the team is what started,
    a ThreadStartWarning says so, and the calls are right (they used to spin forever)."""
    out = run_script("""
    from cortex.plugins.cpu_llvm import runtime
    runtime.WORKER_STACK_BYTES = 1 << 50
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = cortex.compile(model, target="llvm", threads=4)
    got = exe(trees).root("h")
    print(json.dumps({"threads": exe.artifact.threads, "ok": bool(np.allclose(got, want, atol=1e-5)),
                      "warnings": [(w.category.__name__, str(w.message)) for w in caught]}))
    """, timeout=180, prelude=TINY)
    assert out["threads"] == 1 and out["ok"]
    (name, message), = [w for w in out["warnings"] if w[0] == "ThreadStartWarning"]
    assert "only 1 of 4 threads" in message and "pthread_create" in message


@pytest.mark.skipif(not LINUX, reason="sets RLIMIT_STACK (Linux)")
def test_a_huge_stack_limit_neither_hangs_nor_shrinks_the_team():
    """``ulimit -s 400000000``: pthreads would reserve 400 GB per thread. Workers get a fixed
    stack, and the compile's helper threads run inline if Python cannot start them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want_limit = 400_000_000 * 1024
    if hard != resource.RLIM_INFINITY and hard < want_limit:
        pytest.skip(reason=f"the hard stack limit ({hard}) is below 400 GB")

    def huge_stack() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (want_limit, hard))

    out = run_script("""
    exe = cortex.compile(model, target="llvm", threads=2)
    got = exe(trees).root("h")
    print(json.dumps({"threads": exe.artifact.threads, "ok": bool(np.allclose(got, want, atol=1e-5))}))
    """, timeout=180, preexec=huge_stack, prelude=TINY)
    assert out == {"threads": 2, "ok": True}


# ------------------------------------------------------------------ idle executables

@pytest.mark.alone
@pytest.mark.skipif(not LINUX, reason="futex sleep (Linux)")
def test_idle_executables_burn_no_cpu():
    """After a call the workers spin about a millisecond, then sleep until the next call:
    four idle executables cost well under 0.5% of a core each (they used to cost 6%). Run
    alone: beside other tests on two cores (an AMD EPYC VM) it measured 2.6% for the four."""
    out = run_script("""
    import time
    exes = [cortex.compile(TreeFC(hidden=8, embed=8, vocab=10, seed=s), target="llvm", threads=2)
            for s in range(4)]
    for e in exes:
        e(trees)
    time.sleep(0.5)
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(1.5)
    share = (time.process_time() - c0) / (time.perf_counter() - t0)
    again = [bool(np.allclose(e(trees).root("h"), want, atol=1e-5)) for e in exes[:1]]
    print(json.dumps({"cores": share, "again": again}))
    """, timeout=240, prelude=TINY)
    assert out["again"] == [True]  # a sleeping team wakes up for the next call
    assert out["cores"] < 4 * 0.005, f"idle executables used {out['cores']:.3%} of a core"


@pytest.mark.alone
def test_an_idle_executable_does_not_slow_a_numpy_matmul():
    """1024^2 matmuls timed with an idle executable alive and without, interleaved: the best
    times within 1.3x (a spinning worker takes a BLAS thread's core every time; other load on
    a shared machine only sometimes, which the best of several times leaves out)."""
    # another run only when one measured slow: a spinning worker is slow every time, a burst of
    # other load on a shared machine (CI runs two interpreters' tests at once) seldom three times
    runs = []
    for _ in range(3):
        out = run_script("""
        import gc, json, time, numpy as np, cortex
        from cortex.models import TreeFC
        a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
        def matmul_s():
            t = time.perf_counter()
            a @ a
            return time.perf_counter() - t
        matmul_s()
        times = {"with": [], "without": []}
        for r in range(6):
            exe = cortex.compile(TreeFC(hidden=8, embed=8, vocab=10, seed=r), target="llvm")
            exe([((1, 2), 3)])
            time.sleep(0.3)
            times["with"] += [matmul_s() for _ in range(3)]
            del exe
            gc.collect()
            times["without"] += [matmul_s() for _ in range(3)]
        best = {k: min(v) for k, v in times.items()}
        print(json.dumps({"ratio": best["with"] / best["without"], **best}))
        """, timeout=300, env={"OPENBLAS_NUM_THREADS": str(min(os.cpu_count() or 1, 4))})
        runs.append(out)
        if out["ratio"] < 1.3:
            break
    assert runs[-1]["ratio"] < 1.3, runs


# ------------------------------------------------------------------ dropped executables

@pytest.mark.skipif(not LINUX, reason="counts threads in /proc (Linux)")
def test_a_collected_program_joins_its_team_and_frees_its_code():
    exe = cortex.compile(TreeFC(hidden=4, embed=4, vocab=5, seed=0), target="llvm", threads=2)
    exe([((1, 2), 3)])
    jit, before = exe.artifact.jit, _threads()
    assert not jit.closed
    del exe
    gc.collect()
    assert jit.closed
    assert _threads() <= before - 1  # its worker is gone (a helper thread may have ended too)


def test_close_frees_the_code_and_later_calls_fail_cleanly():
    exe = cortex.compile(TreeFC(hidden=4, embed=4, vocab=5, seed=0), target="llvm", threads=2)
    exe.artifact.close()
    assert exe.artifact.jit.closed
    with pytest.raises(RuntimeError, match="closed"):
        exe([((1, 2), 3)])
    exe.artifact.close()  # twice is harmless


@pytest.mark.skipif(not (LINUX and hasattr(ctypes.CDLL(None), "mallinfo2")), reason="glibc's mallinfo2")
def test_jit_modules_leave_no_native_memory_behind():
    """Compile and free the same module again and again: the bytes malloc holds do not grow
    (each compile used to keep its LLVM pass manager: ~40 kB)."""
    out = run_script("""
    import ctypes, gc, json, cortex
    from cortex.models import TreeLSTM
    from cortex.plugins.cpu_llvm.jit import JitModule

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                    "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = Info
    def in_use():
        gc.collect()
        m = mallinfo2()
        return m.uordblks + m.hblkhd
    text = str(cortex.compile(TreeLSTM(hidden=8, embed=8, vocab=20, seed=0), target="llvm").source)
    for _ in range(3):
        JitModule(text).close()
    start = in_use()
    for _ in range(20):
        JitModule(text).close()
    print(json.dumps({"bytes_per_module": (in_use() - start) / 20}))
    """, timeout=300)
    assert out["bytes_per_module"] < 8 * 1024, out


@pytest.mark.skipif(not LINUX, reason="reads /proc (Linux)")
def test_dropped_executables_leave_no_threads_or_descriptors():
    out = run_script("""
    import gc, os, threading, time
    def threads():
        return int(next(l for l in open("/proc/self/status") if l.startswith("Threads:")).split()[1])
    def counts():
        gc.collect()
        for t in threading.enumerate():  # helper threads of a compile (they end by themselves)
            if t is not threading.current_thread():
                t.join()
        seen = [threads()]
        while len(seen) < 3 or len(set(seen[-3:])) > 1:  # a joined thread may still be exiting
            time.sleep(0.05)
            seen.append(threads())
        return seen[-1], len(os.listdir("/proc/self/fd"))
    cortex.compile(model, target="llvm")(trees)
    start = counts()
    for s in range(10):
        cortex.compile(TreeFC(hidden=8, embed=8, vocab=10, seed=s), target="llvm", threads=2)(trees)
    print(json.dumps({"start": start, "end": counts()}))
    """, timeout=300, prelude=TINY)
    assert out["end"] == out["start"]


# ------------------------------------------------------------------ Ctrl-C

@pytest.mark.skipif(not LINUX, reason="the native SIGINT handler is Linux-only")
@pytest.mark.parametrize("split", ["static", "dynamic"])
def test_ctrl_c_stops_a_long_call_at_a_level_barrier_and_the_program_stays_usable(split):
    """SIGINT an eighth into a long chain: KeyboardInterrupt long before the call would have
    ended (it used to come only after the call returned), then the same call gives the same
    states. Also with Python's handler re-installed (it replaces the native one, which the next
    call puts back) and with a handler that does not raise (the runtime raises itself). With
    ``level_split="dynamic"`` the levels end without a team barrier: the threads leave from
    wherever each is (``team.finish_fn``) and the next call still starts clean."""
    out = run_script("""
    import json, os, signal, threading, time, numpy as np, cortex
    from cortex.models import SeqLSTM
    from cortex.data import Sequence
    exe = cortex.compile(SeqLSTM(hidden=32, features=4, seed=0), target="llvm",
                         schedule={"level_split": "%s"})
    batch = exe.linearize([Sequence(np.random.default_rng(0).standard_normal((150000, 4)))])
    full = exe.run(batch).root("h").copy()  # the first call also pays one-time costs
    whole = float("inf")  # the faster of two calls: the machine's load may change meanwhile
    for _ in range(2):
        t = time.perf_counter()
        exe.run(batch)
        whole = min(whole, time.perf_counter() - t)

    def interrupted_after(delay):
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
        t = time.perf_counter()
        try:
            exe.run(batch)
        except KeyboardInterrupt as e:
            return time.perf_counter() - t, str(e)
        try:  # the call ended first: the signal comes now
            time.sleep(5)
        except KeyboardInterrupt:
            pass
        return None, ""

    rows = []
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rows.append(interrupted_after(whole / 8))
    same = bool(np.array_equal(exe.run(batch).root("h"), full))
    seen = []
    signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
    rows.append(interrupted_after(whole / 8))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:  # outside a call Python's handler works as always
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        time.sleep(5)
        plain = False
    except KeyboardInterrupt:
        plain = True
    print(json.dumps({"whole": whole, "rows": rows, "same": same, "seen": seen, "plain": plain}))
    """ % split, timeout=600)
    whole = out["whole"]
    for after, _ in out["rows"]:
        assert after is not None and after < 0.75 * whole, out
    assert out["rows"][1][1].startswith("the native call stopped at a level barrier"), out
    assert out["same"] and out["seen"] == [2] and out["plain"], out


@pytest.mark.skipif(not LINUX, reason="the native SIGINT handler is Linux-only")
def test_ctrl_c_at_any_moment_of_dynamically_split_levels_leaves_the_team_usable():
    """Three threads claiming the units of many levels (``level_split="dynamic"``: no barrier
    between levels, so the threads are interrupted wherever each is): SIGINT at spread-out
    moments of 12 calls, each followed by a call that must give the first call's states."""
    out = run_script("""
    import json, os, signal, threading, time, numpy as np, cortex
    from cortex.bench.workloads import GroupKey, build_model, make_inputs
    signal.signal(signal.SIGINT, signal.default_int_handler)
    model = build_model(GroupKey("TreeLSTM", 64, None, 200, 0))
    exe = cortex.compile(model, target="llvm", threads=3, schedule={"level_split": "dynamic"})
    batch = exe.linearize(make_inputs("TreeLSTM", 200, 400, vocab=200, width=64, seed=0).structures)
    want = exe.run(batch).nodes("h").copy()
    whole = float("inf")
    for _ in range(3):  # the fastest call: a signal at a fraction of it lands inside most calls
        t = time.perf_counter()
        exe.run(batch)
        whole = min(whole, time.perf_counter() - t)
    stopped, same = 0, True
    for k in range(12):
        timer = threading.Timer(whole * (k + 0.5) / 12, os.kill, (os.getpid(), signal.SIGINT))
        called = False
        try:  # (on a loaded machine the signal can come before timer.start() returns)
            timer.start()
            called = True
            exe.run(batch)
        except KeyboardInterrupt:
            stopped += called
        try:  # a signal that came after the call lands here
            timer.join()
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        same = same and bool(np.array_equal(exe.run(batch).nodes("h"), want))
    print(json.dumps({"stopped": stopped, "same": same, "whole": whole}))
    """, timeout=600)
    assert out["same"], out
    assert out["stopped"] >= 4, out  # (a loaded machine makes some calls end before their signal)


# ------------------------------------------------------------------ fork

@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_gets_its_own_team():
    """The child of a fork has none of the parent's worker threads; its calls used to wait for
    them forever. Parent and child both compute the right states after the fork."""
    out = run_script("""
    import os
    exe = cortex.compile(model, target="llvm", threads=2)
    exe(trees)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = bool(np.allclose(exe(trees).root("h"), want, atol=1e-5)) and exe.artifact.threads == 2
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    child = os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    print(json.dumps({"child": child, "parent": bool(np.allclose(exe(trees).root("h"), want, atol=1e-5))}))
    """, timeout=180, prelude=TINY)
    assert out == {"child": True, "parent": True}
