"""The on-disk cache of compiled artifacts, shared by every backend (and offered to plugins).

Pipeline position: beside the last two stages. The pipeline keeps rendered sources here
(:mod:`cortex.core.stage_cache`), and each backend's compiler keeps what it compiles: LLVM
object code (``llvm``), OpenCL program binaries (``opencl``), cubins (``cuda``), shared
libraries (``contrib/cortex-cc``). A second process that compiles the same model for the same
machine finds them and skips rendering and compiling.

Where: ``$CORTEX_CACHE_DIR`` when set, else the user cache directory of ``platformdirs``
(``~/.cache/cortex`` on Linux, following ``XDG_CACHE_HOME``); one subdirectory per namespace.
``CORTEX_CACHE=0`` turns every cache off (nothing is read or written).

What is trusted, and why:

* a cache directory (the root and each namespace) is created ``0700`` and used only when it is
  a directory that the current user owns and that neither group nor others can write to;
  otherwise the cache is refused, with the reason, in one :class:`CacheWarning` per directory,
  and compiling goes on without it;
* an entry is one file ``<key><suffix>``: a header (magic, SHA-256 of the payload, payload
  length) and the payload. A read checks the file's owner and mode, the length and the
  checksum; an entry that fails (truncated, corrupted, planted) is deleted and reported as a
  miss, so the caller rebuilds and stores it again;
* writes go to a temporary file in the same directory, renamed over the entry: a concurrent
  reader sees the old entry, the new one or none, never half of one;
* a directory that cannot be written (read-only, full disk) says so once; compiling goes on,
  without storing.

Keys are the caller's: hex digests of everything the artifact depends on (:func:`digest`).
Entries are never evicted; ``cortex cache --clear`` (or removing the directory) empties them.

Two hooks serve saving and pickling executables (:mod:`cortex.core.persist`):
:func:`recording` collects every entry a compile read or wrote, and :func:`preloaded` offers
entries (from a saved file) that a ``get`` returns before looking at the disk; entries
offered so are never written to the disk. :meth:`DiskCache.carry` records an entry for saving
only, made when it is saved: for artifacts that cost a compile of their own to obtain.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import re
import stat
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

#: The environment variables: the cache's root directory, and the switch (``0`` turns it off).
ENV_DIR = "CORTEX_CACHE_DIR"
ENV_SWITCH = "CORTEX_CACHE"
MAGIC = b"CXCACHE1"
_HEADER = len(MAGIC) + 32 + 8  # magic, sha256 of the payload, payload length (little-endian)
_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


class CacheWarning(UserWarning):
    """A cache directory was refused or could not be written; compiling goes on without it."""


def enabled() -> bool:
    """False when ``CORTEX_CACHE`` is ``0`` (or ``false``/``no``/``off``)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def root() -> Path:
    """The cache root: ``$CORTEX_CACHE_DIR``, else the user cache directory for ``cortex``."""
    given = os.environ.get(ENV_DIR)
    if given:
        return Path(given).expanduser()
    try:
        from platformdirs import user_cache_dir
    except ImportError:  # the XDG rule platformdirs follows on Linux
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "cortex"
    return Path(user_cache_dir("cortex", appauthor=False))


def digest(*parts: str | bytes) -> str:
    """A SHA-256 hex key of ``parts`` (each delimited, so ``("ab", "c") != ("a", "bc")``)."""
    h = hashlib.sha256()
    for p in parts:
        data = p.encode() if isinstance(p, str) else bytes(p)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def package_fingerprint(package: str = "cortex") -> str:
    """A hash of every ``.py`` file of an importable package (path, size and modification
    time: stat calls, no reading), computed once per process: part of the keys of what its
    code produces, so an edited, upgraded or reinstalled package never reads an entry an
    older one wrote."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        origin = spec.origin if spec is not None else None
        files = [Path(origin)] if origin else []
        base = Path(origin).parent if origin else Path(".")
    else:
        base = Path(next(iter(spec.submodule_search_locations)))
        files = sorted(base.rglob("*.py"))
    h = hashlib.sha256(package.encode())
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f.relative_to(base)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def directory_problem(path: Path, uid: int | None = None) -> str | None:
    """Why ``path`` must not be used as a cache directory (None when it may): it is not a
    directory, another user owns it, or group or others can write to it."""
    uid = _uid() if uid is None else uid
    try:
        st = os.stat(path)
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if uid >= 0 and st.st_uid != uid:
        return f"it belongs to {_owner(st.st_uid)}, not to you ({_owner(uid)})"
    if st.st_mode & 0o022:
        return (f"group or others can write to it (mode {stat.S_IMODE(st.st_mode):o}); "
                f"`chmod 700 {path}` makes it private")
    return None


_WARNED: set[tuple[str, str]] = set()
_WARN_LOCK = threading.Lock()


def _warn_once(path: Path, what: str) -> None:
    with _WARN_LOCK:
        if (str(path), what) in _WARNED:
            return
        _WARNED.add((str(path), what))
    warnings.warn(f"cortex cache: {what}", CacheWarning, stacklevel=4)


@dataclass(frozen=True)
class Entry:
    """One entry a compile read or wrote (see :func:`recording`); ``origin``: ``"disk"`` (read
    from the cache), ``"saved"`` (offered by :func:`preloaded`) or ``"new"`` (just made).

    ``payload`` is the bytes, or the
    function that makes them (:meth:`DiskCache.carry`): called once, the first time
    :attr:`data` is read (when the executable is saved or pickled)."""

    namespace: str
    key: str
    payload: bytes | Callable[[], bytes] = field(repr=False)
    origin: str = "new"

    @property
    def data(self) -> bytes:
        if callable(self.payload):
            object.__setattr__(self, "payload", bytes(self.payload()))
        return self.payload  # type: ignore[return-value]


_RECORDING: contextvars.ContextVar[list[Entry] | None] = contextvars.ContextVar("cortex_cache_recording", default=None)
_PRELOADED: contextvars.ContextVar[Mapping[tuple[str, str], bytes]] = contextvars.ContextVar("cortex_cache_preloaded", default={})


@contextlib.contextmanager
def recording() -> Iterator[list[Entry]]:
    """Collect, in this thread, every entry that a ``get`` found or a ``put`` was given
    (also while the cache is off): what a saved executable carries."""
    found: list[Entry] = []
    token = _RECORDING.set(found)
    try:
        yield found
    finally:
        _RECORDING.reset(token)


@contextlib.contextmanager
def preloaded(entries: Mapping[tuple[str, str], bytes]) -> Iterator[None]:
    """In this thread, ``get(namespace, key)`` returns ``entries[(namespace, key)]`` first (from
    a saved executable); those entries are never written to the disk."""
    token = _PRELOADED.set({**_PRELOADED.get(), **entries})
    try:
        yield
    finally:
        _PRELOADED.reset(token)


def _record(namespace: str, key: str, data: bytes | Callable[[], bytes], origin: str) -> None:
    found = _RECORDING.get()
    if found is not None and not any(e.namespace == namespace and e.key == key for e in found):
        found.append(Entry(namespace, key, data, origin))


class DiskCache:
    """The entries of one namespace (``llvm``, ``opencl``...), under :func:`root` or under
    ``directory`` when given (a plugin's own override). Cheap to create; the directory is
    made and checked on first use."""

    def __init__(self, namespace: str, *, directory: str | os.PathLike | None = None,
                 suffix: str = "") -> None:
        if not _KEY.match(namespace):
            raise ValueError(f"cache namespace {namespace!r} must be letters, digits, '_', '-', '.'")
        self.namespace = namespace
        self._directory = Path(directory).expanduser() if directory else None
        self.suffix = suffix
        self.hits = self.misses = self.rejected = 0  # this object's reads (for tests and reports)

    @property
    def path(self) -> Path:
        """The directory of this namespace's entries."""
        return self._directory if self._directory is not None else root() / self.namespace

    def path_of(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"cache key {key!r} must be letters, digits, '_', '-', '.'")
        return self.path / f"{key}{self.suffix}"

    def problem(self) -> str | None:
        """Why this cache is not used now (None when it is): switched off, or a directory it
        needs cannot be made or is refused (:func:`directory_problem`)."""
        if not enabled():
            return f"{ENV_SWITCH}=0"
        path = self.path
        dirs = [path] if self._directory is not None else [path.parent, path]
        for d in dirs:
            if not d.is_dir():
                try:
                    os.makedirs(d, mode=0o700, exist_ok=True)
                except OSError as e:
                    return f"cannot create {d} ({e.strerror or e}); compiling without a cache"
            why = directory_problem(d)
            if why is not None:
                return f"refusing the cache directory {d}: {why}; compiling without a cache"
        return None

    def _usable(self) -> bool:
        why = self.problem()
        if why is None:
            return True
        if enabled():
            _warn_once(self.path, why)
        return False

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, checked; None when absent, refused or damaged (a
        damaged entry is deleted)."""
        pre = _PRELOADED.get().get((self.namespace, key))
        if pre is not None:
            _record(self.namespace, key, pre, "saved")
            self.hits += 1
            return pre
        path = self.path_of(key)
        if not self._usable():
            self.misses += 1
            return None
        data = self._read(path)
        if data is None:
            self.misses += 1
            return None
        _record(self.namespace, key, data, "disk")
        self.hits += 1
        return data

    def _read(self, path: Path) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read() if stat.S_ISREG(st.st_mode) else b""
        uid = _uid()
        sound = (stat.S_ISREG(st.st_mode) and (uid < 0 or st.st_uid == uid) and not st.st_mode & 0o022
                 and len(raw) >= _HEADER and raw[:len(MAGIC)] == MAGIC)
        if sound:
            checksum, size = raw[len(MAGIC):len(MAGIC) + 32], int.from_bytes(raw[_HEADER - 8:_HEADER], "little")
            payload = raw[_HEADER:]
            sound = len(payload) == size and hashlib.sha256(payload).digest() == checksum
        if not sound:
            self.rejected += 1
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        return payload

    def put(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` (atomically); False when the cache is off, refused or
        unwritable (said once)."""
        data = bytes(data)
        path = self.path_of(key)
        _record(self.namespace, key, data, "new")
        if not self._usable():
            return False
        header = MAGIC + hashlib.sha256(data).digest() + len(data).to_bytes(8, "little")
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=self.suffix)
            with os.fdopen(fd, "wb") as f:
                f.write(header)
                f.write(data)
            os.replace(tmp, path)
            return True
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            _warn_once(path.parent, f"cannot write to {path.parent} ({e.strerror or e}); "
                                    "compiling without storing what is compiled")
            return False

    def carry(self, key: str, make: Callable[[], bytes]) -> None:
        """An entry that a saved or pickled executable carries but the disk does not get:
        ``make`` runs only when the executable is saved or pickled. For an artifact whose bytes
        cost a compile of their own to obtain, where the driver already keeps its builds (PoCL
        compiles every kernel once more to hand out a program binary, and caches its builds
        itself)."""
        _record(self.namespace, key, make, "new")

    def entries(self) -> list[Path]:
        """The entry files of this namespace (no checks)."""
        try:
            return sorted(p for p in self.path.iterdir() if p.is_file() and not p.name.startswith(".tmp-"))
        except OSError:
            return []

    def clear(self) -> int:
        """Delete every entry (and leftover temporary files); returns how many files."""
        n = 0
        try:
            files = [p for p in self.path.iterdir() if p.is_file()]
        except OSError:
            return 0
        for p in files:
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
        return n


def namespaces() -> list[str]:
    """The namespaces present under :func:`root`."""
    try:
        return sorted(p.name for p in root().iterdir() if p.is_dir() and _KEY.match(p.name))
    except OSError:
        return []


def report(clear: bool = False) -> dict[str, object]:
    """What ``cortex cache`` shows: the root, whether caching is on (and why not), and per
    namespace its entries and bytes; ``clear`` deletes every entry first."""
    base = root()
    out: dict[str, object] = {"root": str(base), "enabled": enabled(),
                              "problem": directory_problem(base) if base.is_dir() else None}
    spaces: dict[str, dict[str, int]] = {}
    for name in namespaces():
        cache = DiskCache(name)
        removed = cache.clear() if clear else 0
        files = cache.entries()
        spaces[name] = {"entries": len(files), "bytes": sum(f.stat().st_size for f in files),
                        "removed": removed}
    out["namespaces"] = spaces
    return out
