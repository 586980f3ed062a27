"""The on-disk artifact cache (cortex.core.diskcache): where it lives, what it refuses, how a
damaged or planted entry is rebuilt, atomic writes, the switch, recording and preloading."""

from __future__ import annotations

import os
import stat
import tempfile
import warnings

import pytest

from cortex.core import diskcache
from cortex.core.diskcache import CacheWarning, DiskCache


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("CORTEX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CORTEX_CACHE", raising=False)
    monkeypatch.setattr(diskcache, "_WARNED", set())  # each test sees its warnings
    return tmp_path / "cache"


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_entries_round_trip_in_private_directories_with_a_checksum_header(root):
    cache = DiskCache("llvm", suffix=".o")
    assert cache.get("k1") is None and cache.misses == 1
    assert cache.put("k1", b"object code")
    assert cache.get("k1") == b"object code" and cache.hits == 1
    assert cache.path == root / "llvm" and (root / "llvm" / "k1.o").is_file()
    assert _mode(root) == 0o700 and _mode(root / "llvm") == 0o700 and _mode(root / "llvm" / "k1.o") == 0o600
    raw = (root / "llvm" / "k1.o").read_bytes()
    assert raw.startswith(diskcache.MAGIC) and raw.endswith(b"object code")
    assert not [p for p in (root / "llvm").iterdir() if p.name.startswith(".tmp-")]  # renamed in place
    with pytest.raises(ValueError, match="cache key"):
        cache.get("../escape")


def test_the_root_follows_cortex_cache_dir_else_the_user_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CORTEX_CACHE_DIR", str(tmp_path / "mine"))
    assert diskcache.root() == tmp_path / "mine"
    monkeypatch.delenv("CORTEX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert diskcache.root() == tmp_path / "xdg" / "cortex"  # platformdirs' rule on Linux


@pytest.mark.parametrize("damage", ["truncated", "planted", "flipped", "empty"])
def test_a_damaged_or_planted_entry_is_a_miss_and_is_deleted(root, damage):
    cache = DiskCache("cuda", suffix=".cubin")
    cache.put("k", b"\x7fELF a real cubin" * 100)
    path = cache.path_of("k")
    raw = path.read_bytes()
    bad = {"truncated": raw[: len(raw) - 7],
           "planted": b"\x7fELF someone else's code",
           "flipped": raw[:-1] + bytes([raw[-1] ^ 1]),
           "empty": b""}[damage]
    path.write_bytes(bad)
    assert cache.get("k") is None and cache.rejected == 1 and not path.exists()
    assert cache.put("k", b"rebuilt") and cache.get("k") == b"rebuilt"


def test_a_planted_entry_with_a_valid_header_but_another_owner_is_refused(root, monkeypatch):
    cache = DiskCache("cc", suffix=".so")
    cache.put("k", b"library")
    me = os.getuid()
    # the directory stays acceptable; the entry file now looks like someone else's
    monkeypatch.setattr(diskcache, "directory_problem", lambda path, uid=None: None)
    monkeypatch.setattr(diskcache, "_uid", lambda: me + 1)
    assert cache.get("k") is None and cache.rejected == 1


def test_a_group_writable_directory_is_refused_with_the_reason_once(root):
    cache = DiskCache("opencl")
    cache.put("k", b"binary")
    os.chmod(cache.path, 0o775)
    with pytest.warns(CacheWarning, match=r"refusing the cache directory .*opencl.*group or others can write.*chmod 700"):
        assert cache.get("k") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per directory, not on every use
        assert cache.get("k") is None and cache.put("k2", b"x") is False
    assert not cache.path_of("k2").exists()


def test_a_directory_owned_by_another_user_is_refused(root):
    (root / "llvm").mkdir(parents=True, mode=0o700)
    other = os.getuid() + 1
    why = diskcache.directory_problem(root / "llvm", uid=other)
    assert why is not None and "belongs to" in why and f"uid {other}" in why
    assert diskcache.directory_problem(root / "llvm") is None
    (root / "file").write_text("x")
    assert diskcache.directory_problem(root / "file") == "it is not a directory"


def test_an_unwritable_cache_goes_on_without_storing_and_says_so_once(root, monkeypatch):
    cache = DiskCache("llvm")
    cache.put("old", b"kept")

    def read_only(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.warns(CacheWarning, match="cannot write to .*Read-only file system.*without storing"):
        assert cache.put("new", b"x") is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.put("new2", b"x") is False
    assert cache.get("old") == b"kept"  # reading still works


def test_a_root_that_cannot_be_created_is_reported(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("CORTEX_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    monkeypatch.setattr(diskcache, "_WARNED", set())
    with pytest.warns(CacheWarning, match="cannot create"):
        assert DiskCache("llvm").put("k", b"x") is False


def test_cortex_cache_0_turns_every_cache_off_silently(root, monkeypatch):
    DiskCache("llvm").put("k", b"x")
    monkeypatch.setenv("CORTEX_CACHE", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DiskCache("llvm").get("k") is None
        assert DiskCache("llvm").put("k2", b"y") is False
    assert not (root / "llvm" / "k2").exists()
    assert DiskCache("llvm").problem() == "CORTEX_CACHE=0"


def test_recording_collects_what_was_read_and_written_and_preloaded_entries_come_first(root):
    cache = DiskCache("sources")
    cache.put("a", b"A")
    with diskcache.recording() as seen:
        cache.get("a")
        cache.put("b", b"B")
        cache.get("missing")
    assert [(e.namespace, e.key, e.data, e.origin) for e in seen] == [
        ("sources", "a", b"A", "disk"), ("sources", "b", b"B", "new")]
    with diskcache.preloaded({("sources", "c"): b"C"}), diskcache.recording() as seen:
        assert cache.get("c") == b"C"
    assert seen[0].origin == "saved" and not cache.path_of("c").exists()  # never written
    assert cache.get("c") is None  # outside the block: gone


def test_keys_delimit_their_parts_and_fingerprints_are_stable():
    assert diskcache.digest("ab", "c") != diskcache.digest("a", "bc")
    assert diskcache.package_fingerprint("cortex") == diskcache.package_fingerprint("cortex")
    assert len(diskcache.package_fingerprint("cortex")) == 64


def test_clear_and_entries(root):
    cache = DiskCache("cuda", suffix=".cubin")
    cache.put("a", b"1")
    cache.put("b", b"2")
    assert [p.name for p in cache.entries()] == ["a.cubin", "b.cubin"]
    assert "cuda" in diskcache.namespaces()
    assert cache.clear() == 2 and cache.entries() == []


def test_cortex_cache_shows_and_clears_the_cache(root, capsys):
    from cortex.cli import main

    DiskCache("llvm").put("k", b"x" * 100)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert f"Compile cache: {root}  [on]" in out and "llvm" in out and "1 entries" in out
    assert main(["cache", "--clear", "--json"]) == 0
    assert '"removed": 1' in capsys.readouterr().out and DiskCache("llvm").entries() == []
