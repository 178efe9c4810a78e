"""``--nvlink-json=FILE``: the results record as versioned JSON, the input of fleet merging.

The layout is ``results.schema.json`` next to this module (JSON Schema draft 2020-12), described
in the README. ``node`` is the snapshot format ``--nvlink-save`` writes (probe facts and every
measurement with its conditions), so the file also serves as a baseline of the node.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_nvlink import __version__
from pytest_nvlink.core.atomic import write_text_atomically
from pytest_nvlink.model.document import node_to_dict
from pytest_nvlink.record.baseline import baseline_document
from pytest_nvlink.record.items import ItemResult
from pytest_nvlink.record.results import Results, source_text

RESULTS_KIND = "pytest-nvlink-results"
RESULTS_SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).resolve().parent / "results.schema.json"


def results_document(results: Results) -> dict[str, Any]:
    run = results.run
    return {
        "kind": RESULTS_KIND,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "plugin_version": __version__,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": results.verdict,
        **_left_out(results),
        "host": run.host,
        "source": source_text(run),
        "suite": {"name": run.suite.name, "file": str(run.suite.file), "gpu_count": run.suite.gpu_count},
        "thresholds": {"name": run.thresholds.name, "files": [str(f) for f in run.thresholds.files]},
        "counts": results.counts(),
        "audit": results.audit,
        "audit_counts": {"judged": results.audit_counts.judged, "applicable": results.audit_counts.applicable},
        "items": [_item(item) for item in results.items],
        "baseline": baseline_document(results.baseline),
        "nccl_transports": [{"transport": name, "channels": count} for name, count in results.nccl_transports],
        **_sections(results),
        "node": node_to_dict(run.node),
    }


def _left_out(results: Results) -> dict[str, Any]:
    """What a partial or interrupted run left out of the suite's checks; no key at all for a complete run."""
    left_out = results.scope.document() if results.scope is not None else None
    return {} if left_out is None else {"left_out": left_out}


def _sections(results: Results) -> dict[str, Any]:
    """A site's report sections (``pytest_nvlink_report_sections``); no key at all when none returned any."""
    if not results.sections:
        return {}
    return {"sections": [{"title": s.title, "lines": list(s.lines)} for s in results.sections]}


def _item(item: ItemResult) -> dict[str, Any]:
    pairs = {} if item.pairs is None else {"pairs": item.pairs}
    return {
        "nodeid": item.nodeid,
        "check": item.check,
        "area": item.area,
        "outcome": item.outcome,
        "pytest_outcome": item.pytest_outcome,
        "message": item.message,
        "properties": dict(item.properties),
        **pairs,
    }


def write_results_json(results: Results, path: Path) -> None:
    """Written atomically: a fleet merge never reads half a file."""
    text = json.dumps(results_document(results), indent=1, sort_keys=False) + "\n"
    write_text_atomically(path, text)


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema
