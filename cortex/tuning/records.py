"""Tuning records: the best schedule found per (graph, target + device, dtype, workload class).

Pipeline position: beside the pipeline. :func:`cortex.tune` writes records (and every measured
trial, so a session can resume); ``cortex.compile(schedule="auto")`` — the default — reads them
through :func:`auto_schedule`. That read path imports nothing but ``sqlite3`` and creates
nothing when no database exists, so a compile pays a few milliseconds for it.

Where: ``$CORTEX_TUNE_DB`` (a file path) when set, else ``tuning/records.sqlite`` under the
disk cache's root (:func:`cortex.core.diskcache.root`: ``$CORTEX_CACHE_DIR``, else
``platformdirs``' user cache directory for ``cortex``, i.e. ``~/.cache/cortex`` on Linux).
``CORTEX_CACHE=0`` turns off the compile caches, not the records.

Keys (:class:`RecordKey`): the graph fingerprint and the device fingerprint
(:mod:`cortex.tuning.fingerprint`), the target's name, the dtype and the workload class
(:mod:`cortex.tuning.workload`). A compile matches records with the same graph, target, device
and dtype exactly; among those it takes the one for the workload class it is asked for
(``workload=`` compile option), else the nearest class, else (no class asked) the newest.

Damage: a database file that SQLite cannot read (not a database, malformed, a schema this
version does not know) is moved aside to ``<name>.corrupt-<time>`` with a
:class:`TuningRecordsWarning` and an empty one is made in its place; a database that is only
busy (locked by another process) is left alone and the compile uses the default rules.

Export / import: JSON lines, one record per line (``{"format": "cortex-tuning-record",
"version": 1, ...}``), so a team can ship tuned schedules with a model. An imported record
replaces a stored one with the same key only when it is newer.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

ENV_DB = "CORTEX_TUNE_DB"
SCHEMA_VERSION = 1
JSONL_FORMAT = "cortex-tuning-record"

_KEY_COLUMNS = ("graph", "target", "device", "dtype", "workload")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    graph TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL,
    workload TEXT NOT NULL,
    schedule TEXT NOT NULL, speedup REAL NOT NULL, seconds REAL NOT NULL,
    default_seconds REAL NOT NULL, trials INTEGER NOT NULL, method TEXT NOT NULL,
    model TEXT NOT NULL, device_info TEXT NOT NULL, workload_info TEXT NOT NULL,
    cortex_version TEXT NOT NULL, created REAL NOT NULL,
    UNIQUE ({", ".join(_KEY_COLUMNS)})
);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    graph TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL,
    workload TEXT NOT NULL,
    schedule TEXT NOT NULL, ok INTEGER NOT NULL, ratio REAL, compile_s REAL NOT NULL,
    error TEXT NOT NULL, features TEXT NOT NULL, session TEXT NOT NULL, created REAL NOT NULL,
    measured INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS trials_key ON trials ({", ".join(_KEY_COLUMNS[:4])});
PRAGMA user_version = {SCHEMA_VERSION};
"""


class TuningRecordsWarning(UserWarning):
    """The tuning records could not be read as they were (damaged, busy, unreadable)."""


@dataclass(frozen=True)
class RecordKey:
    graph: str
    target: str
    device: str
    dtype: str
    workload: str


@dataclass(frozen=True)
class Record:
    """The tuned schedule of one key, and how it was found and measured."""

    key: RecordKey
    schedule: dict[str, Any]  # knob -> value (the default's knobs where absent)
    speedup: float  # default's time / this schedule's, interleaved on the workload
    seconds: float  # median seconds of one pass over the workload
    default_seconds: float
    trials: int
    method: str  # "model" or "random"
    model: str = ""  # the model's name (for people; the graph fingerprint is the key)
    device_info: dict[str, Any] = field(default_factory=dict)
    workload_info: dict[str, Any] = field(default_factory=dict)
    cortex_version: str = ""
    created: float = 0.0
    id: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": JSONL_FORMAT, "version": SCHEMA_VERSION}
        out.update(asdict(self.key))
        out.update({f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("key", "id")})
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Record":
        if not isinstance(d, Mapping) or d.get("format") != JSONL_FORMAT:
            raise ValueError(f"not a tuning record (format must be {JSONL_FORMAT!r})")
        if d.get("version") != SCHEMA_VERSION:
            raise ValueError(f"tuning record version {d.get('version')!r}; this Cortex reads {SCHEMA_VERSION}")
        try:
            key = RecordKey(**{k: d[k] for k in _KEY_COLUMNS})
            rec = cls(key=key, schedule=dict(d["schedule"]), speedup=float(d["speedup"]),
                      seconds=float(d["seconds"]), default_seconds=float(d["default_seconds"]),
                      trials=int(d["trials"]), method=str(d["method"]), model=str(d.get("model", "")),
                      device_info=dict(d.get("device_info", {})),
                      workload_info=dict(d.get("workload_info", {})),
                      cortex_version=str(d.get("cortex_version", "")),
                      created=float(d.get("created", 0.0)))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed tuning record: {e}") from None
        if not all(isinstance(getattr(key, k), str) and getattr(key, k) for k in _KEY_COLUMNS):
            raise ValueError("malformed tuning record: every key field must be a non-empty string")
        return rec

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.created))
        return (f"tuning record {self.id} (workload {self.key.workload}, {self.speedup:.2f}x the "
                f"default schedule's speed over {self.trials} trials, {self.method} search, {when})")


@dataclass(frozen=True)
class Trial:
    """One candidate: its knobs, whether it compiled and matched the reference, and its time as
    a ratio to the default schedule's (measured in the same interleaved rounds). ``measured``
    is False for a candidate that lowers to a program measured before: it takes that ratio
    and is neither compiled nor timed again."""

    schedule: dict[str, Any]
    ok: bool
    ratio: float | None  # candidate time / default time; None when not ok
    compile_s: float
    error: str = ""
    features: tuple[float, ...] = ()  # the workload's features (cost model)
    workload: str = ""
    session: str = ""
    measured: bool = True


def db_path() -> Path:
    """The records database: ``$CORTEX_TUNE_DB``, else ``<cache root>/tuning/records.sqlite``."""
    from cortex.core.diskcache import root

    given = os.environ.get(ENV_DB)
    if given:
        return Path(given).expanduser()
    return root() / "tuning" / "records.sqlite"


def _damaged(e: sqlite3.Error) -> bool:
    """True when ``e`` says the file is not a usable records database (as opposed to busy)."""
    text = str(e).lower()
    if any(w in text for w in ("locked", "busy", "unable to open", "readonly", "read-only", "disk i/o")):
        return False
    return isinstance(e, sqlite3.DatabaseError)


class RecordStore:
    """The records database at ``path`` (default :func:`db_path`)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else db_path()
        self._conn: sqlite3.Connection | None = None

    # ---- connection ---------------------------------------------------------------------

    def _open(self, create: bool) -> sqlite3.Connection | None:
        """A connection to a checked database; None when there is none and ``create`` is off."""
        if self._conn is not None:
            return self._conn
        if not create and not self.path.is_file():
            return None
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for attempt in (0, 1):
            conn = sqlite3.connect(str(self.path), timeout=5.0)
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version == 0:
                    conn.executescript(_SCHEMA)
                elif version != SCHEMA_VERSION:
                    raise sqlite3.DatabaseError(f"schema version {version}, this Cortex reads {SCHEMA_VERSION}")
                conn.execute("SELECT id FROM records LIMIT 1").fetchall()
                conn.execute("SELECT id, measured FROM trials LIMIT 1").fetchall()
                self._conn = conn
                return conn
            except sqlite3.Error as e:
                conn.close()
                if attempt or not _damaged(e):
                    raise
                self._rebuild(e)
        return None  # pragma: no cover (the loop returns or raises)

    def _rebuild(self, error: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            os.replace(self.path, aside)
            moved = f"moved it to {aside}"
        except OSError:
            self.path.unlink(missing_ok=True)
            moved = "removed it"
        for suffix in ("-journal", "-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        warnings.warn(f"the tuning records at {self.path} could not be read ({error}); {moved} "
                      f"and started an empty database", TuningRecordsWarning, stacklevel=4)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "RecordStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- records ------------------------------------------------------------------------

    def put(self, record: Record, *, only_if_newer: bool = False) -> bool:
        """Store ``record`` (replacing the one with the same key; with ``only_if_newer`` only
        when ``record`` is newer). Returns whether it was stored."""
        conn = self._open(create=True)
        assert conn is not None
        with conn:
            if only_if_newer:
                row = conn.execute(f"SELECT created FROM records WHERE {_WHERE_KEY}",
                                   _key_values(record.key)).fetchone()
                if row is not None and row[0] >= record.created:
                    return False
            conn.execute(f"DELETE FROM records WHERE {_WHERE_KEY}", _key_values(record.key))
            conn.execute(
                "INSERT INTO records (graph, target, device, dtype, workload, schedule, speedup, "
                "seconds, default_seconds, trials, method, model, device_info, workload_info, "
                "cortex_version, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (*_key_values(record.key), json.dumps(record.schedule, sort_keys=True),
                 record.speedup, record.seconds, record.default_seconds, record.trials,
                 record.method, record.model, json.dumps(record.device_info, sort_keys=True),
                 json.dumps(record.workload_info, sort_keys=True), record.cortex_version,
                 record.created or time.time()))
        return True

    def records(self, graph: str | None = None, target: str | None = None,
                device: str | None = None, dtype: str | None = None) -> list[Record]:
        """The stored records, newest first, optionally only those matching the given fields."""
        conn = self._open(create=False)
        if conn is None:
            return []
        where, values = _filters(graph=graph, target=target, device=device, dtype=dtype)
        rows = conn.execute(f"SELECT * FROM records {where} ORDER BY created DESC, id DESC", values)
        return [_record(r, [c[0] for c in rows.description]) for r in rows.fetchall()]

    def best(self, graph: str, target: str, device: str, dtype: str,
             workload: str | None = None) -> tuple[Record, str] | None:
        """The record a compile uses and why: the asked workload class, else the nearest one,
        else (none asked) the newest. None when no record matches graph, target, device, dtype."""
        found = self.records(graph, target, device, dtype)
        if not found:
            return None
        if workload is None:
            return found[0], "the newest record for this model and device"
        from cortex.tuning.workload_class import class_distance

        exact = [r for r in found if r.key.workload == workload]
        if exact:
            return exact[0], f"tuned for the requested workload class {workload}"
        best = min(found, key=lambda r: class_distance(r.key.workload, workload))
        return best, f"the nearest to the requested workload class {workload}"

    # ---- trials -------------------------------------------------------------------------

    def add_trials(self, key: RecordKey, trials: Iterable[Trial]) -> None:
        conn = self._open(create=True)
        assert conn is not None
        now = time.time()
        with conn:
            conn.executemany(
                "INSERT INTO trials (graph, target, device, dtype, workload, schedule, ok, ratio, "
                "compile_s, error, features, session, created, measured) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(*_key_values(key)[:4], t.workload or key.workload,
                  json.dumps(t.schedule, sort_keys=True), int(t.ok), t.ratio, t.compile_s,
                  t.error, json.dumps(list(t.features)), t.session, now, int(t.measured))
                 for t in trials])

    def trials(self, graph: str, target: str, device: str, dtype: str) -> list[Trial]:
        """Every stored trial of this model and device, every workload class, oldest first."""
        conn = self._open(create=False)
        if conn is None:
            return []
        where, values = _filters(graph=graph, target=target, device=device, dtype=dtype)
        rows = conn.execute(f"SELECT schedule, ok, ratio, compile_s, error, features, workload, "
                            f"session, measured FROM trials {where} ORDER BY id", values).fetchall()
        return [Trial(json.loads(s), bool(ok), ratio, cs, err, tuple(json.loads(f)), wl, sess,
                      bool(m)) for s, ok, ratio, cs, err, f, wl, sess, m in rows]

    # ---- JSON lines ---------------------------------------------------------------------

    def export_jsonl(self, path: str | os.PathLike, records: Iterable[Record] | None = None) -> int:
        """Write ``records`` (default: every stored one) to ``path``; returns how many."""
        chosen = list(self.records() if records is None else records)
        with open(path, "w", encoding="utf-8") as f:
            for r in chosen:
                f.write(json.dumps(r.to_json(), sort_keys=True) + "\n")
        return len(chosen)

    def import_jsonl(self, path: str | os.PathLike) -> dict[str, int]:
        """Read records from ``path``; each replaces a stored one with its key when newer.
        Returns counts: ``stored``, ``kept`` (an as new or newer record was there) and
        ``invalid`` (lines that are not records; a warning names the first)."""
        counts = {"stored": 0, "kept": 0, "invalid": 0}
        first_error = ""
        for lineno, rec in _read_jsonl(path):
            if isinstance(rec, str):
                counts["invalid"] += 1
                first_error = first_error or f"line {lineno}: {rec}"
                continue
            counts["stored" if self.put(rec, only_if_newer=True) else "kept"] += 1
        if counts["invalid"]:
            warnings.warn(f"{path}: {counts['invalid']} lines are not tuning records (first: "
                          f"{first_error})", TuningRecordsWarning, stacklevel=2)
        return counts


def _read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Record | str]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, Record.from_json(json.loads(line))
            except (json.JSONDecodeError, ValueError) as e:
                yield lineno, str(e)


_WHERE_KEY = " AND ".join(f"{c} = ?" for c in _KEY_COLUMNS)


def _key_values(key: RecordKey) -> tuple[str, ...]:
    return tuple(getattr(key, c) for c in _KEY_COLUMNS)


def _filters(**given: str | None) -> tuple[str, tuple[str, ...]]:
    used = [(k, v) for k, v in given.items() if v is not None]
    if not used:
        return "", ()
    return "WHERE " + " AND ".join(f"{k} = ?" for k, _ in used), tuple(v for _, v in used)


def _record(row: tuple, columns: list[str]) -> Record:
    d = dict(zip(columns, row))
    return Record(key=RecordKey(**{k: d[k] for k in _KEY_COLUMNS}), schedule=json.loads(d["schedule"]),
                  speedup=d["speedup"], seconds=d["seconds"], default_seconds=d["default_seconds"],
                  trials=d["trials"], method=d["method"], model=d["model"],
                  device_info=json.loads(d["device_info"]), workload_info=json.loads(d["workload_info"]),
                  cortex_version=d["cortex_version"], created=d["created"], id=d["id"])


# ---- the compile's read path ---------------------------------------------------------------


def auto_schedule(graph: str | None, target: str, options: Mapping[str, Any], backend: Any,
                  space: Any, workload: str | None = None) -> tuple[Any, dict[str, str], str]:
    """``(schedule, sources, why)`` for ``schedule="auto"`` and a graph fingerprint: the best
    matching record's schedule (validated against ``space``; knobs the record lacks follow
    their default rules), else the space's default; ``sources`` says where each knob's value
    came from (``ScheduleSpace.resolve``; a record's knobs say ``"tuning record N"``). Never
    raises for a missing, busy or damaged database: that falls back to the default rules (a
    damaged one is rebuilt with a :class:`TuningRecordsWarning`)."""
    from cortex.core.lowering.schedule import ScheduleError

    def default(why: str) -> tuple[Any, dict[str, str], str]:
        return (*space.resolve(None), why)

    if graph is None:
        return default("default rules (a graph pass without an import name: no tuning records)")
    from cortex.tuning.fingerprint import device_description, device_fingerprint

    store = RecordStore()
    try:
        found = store.best(graph, target,
                           device_fingerprint(device_description(target, options, backend)),
                           space.dtype, workload)
    except sqlite3.Error as e:
        warnings.warn(f"the tuning records at {store.path} could not be read ({e}); compiling with "
                      f"the default rules", TuningRecordsWarning, stacklevel=3)
        return default("default rules (the tuning records could not be read)")
    finally:
        store.close()
    if found is None:
        return default("default rules (no tuning record for this model, target and device)")
    record, why = found
    try:
        schedule, sources = space.resolve(record.schedule)
    except ScheduleError as e:
        first = str(e).splitlines()[-1].strip()
        return default(f"default rules ({record.describe()} is not legal here any more: {first})")
    sources = {k: f"tuning record {record.id}" if v == "user" else v for k, v in sources.items()}
    return schedule, sources, f"{record.describe()}: {why}"
