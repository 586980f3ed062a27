"""Fingerprints of what a tuned schedule depends on: the model's graph and the device.

Pipeline position: beside the pipeline; the keys of the tuning records
(:mod:`cortex.tuning.records`). ``cortex.compile`` computes both on every compile that reads
the records, so they are cheap (no device probe, no heavy import) and computed from what the
pipeline has already built:

* :func:`graph_fingerprint` hashes the graph *after* the graph passes — its text (ops, shapes,
  param names and shapes, derived params' recipes), never the param values — so retrained
  weights keep their records, while another architecture, size, pass list or table limit
  (which give another program) does not match.
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
from typing import Any, Mapping

from cortex.core.plugin import hostinfo


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def graph_fingerprint(graph: Any) -> str:
    """A hex key of the graph after passes (``exe.graph``): its text, without param values."""
    return _digest(str(graph))


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
