"""Fingerprints of what a tuned schedule depends on: the model's graph and the device.

Pipeline position: beside the pipeline; the keys of the tuning records
(:mod:`cortex.tuning.records`). ``cortex.compile`` computes both on every compile that reads
the records, so they are cheap (no device probe, no heavy import) and computed from what the
pipeline has already built:

* :func:`graph_fingerprint` hashes what the graph after the graph passes is made of: the
  traced graph's text (ops, shapes, param names and shapes, never the param values), the
  passes by import name and the table limit — so retrained weights keep their records, while
  another architecture, size, pass list or table limit (which give another program) does not
  match. It is known before the passes run, so a compile that finds the passes' graph in the
  disk cache can still pick its schedule first.
* :func:`device_fingerprint` hashes the target's name and resolved options, its
  :class:`~cortex.core.plugin.capabilities.Capabilities`, its compiler's ``identity`` (code
  generation revision, backend library versions and, for a device, its name and driver), and
  the host CPU's name and SIMD features. :func:`device_description` is the same data, readable,
  stored beside each record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from cortex.core.plugin import hostinfo


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def graph_fingerprint(traced: Any, passes: Sequence[Any], table_elements: int | None) -> str | None:
    """A hex key of what the graph after passes is made from: the traced graph's text (no param
    values), the graph passes by import name and the table limit. None when a pass has no
    import name (a lambda, a function made in a function): such compiles have no records."""
    names = []
    for p in passes:
        qualname = getattr(p, "__qualname__", "<none>")
        if "<" in qualname:
            return None
        names.append(f"{getattr(p, '__module__', '?')}.{qualname}")
    return _digest(f"{traced}\0{chr(10).join(names)}\0{table_elements!r}")


def device_description(target: str, options: Mapping[str, Any], backend: Any) -> dict[str, Any]:
    """What the device fingerprint covers, as plain data."""
    return {
        "target": target,
        "options": {k: options[k] for k in sorted(options)},
        "capabilities": asdict(backend.capabilities),
        "compiler": str(getattr(backend.compiler, "identity", "")),
        "host_cpu": hostinfo.cpu_name(),
        "cpu_features": hostinfo.simd_features(),
    }


def device_fingerprint(description: Mapping[str, Any]) -> str:
    """A hex key of :func:`device_description`'s data."""
    return _digest(json.dumps(description, sort_keys=True, default=repr))
