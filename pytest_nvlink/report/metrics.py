"""``--nvlink-metrics=FILE.prom``: the run's verdict and figures for node_exporter's textfile collector.

Rendered from the results record by prometheus-client's own exposition code (so the text is what
Prometheus parses), and written through the one atomic writer: node_exporter reads the folder at any
moment and requires a whole file, renamed into place.

Every figure is a gauge labelled with the host, so the files of a fleet can be scraped side by side:

- ``pytest_nvlink_verdict{host, suite, verdict}``: 1 for this run's verdict, 0 for the others;
- ``pytest_nvlink_run_timestamp_seconds``, ``pytest_nvlink_checks{outcome}``;
- ``pytest_nvlink_check_failed{check, item}``: 1 per failing item, so an alert names it;
- ``pytest_nvlink_p2p_bandwidth_gbps{src, dst, kind}``, ``pytest_nvlink_p2p_latency_us{src, dst}``;
- ``pytest_nvlink_collective_busbw_gbps{op, size_bytes, ranks}``;
- ``pytest_nvlink_host_link_gbps{gpu, direction}``: each GPU's host<->device figure (``h2d``, ``d2h``,
  ``bidir_h2d``, ``bidir_d2h``);
- ``pytest_nvlink_nvlinks_active{gpu}`` and ``pytest_nvlink_nvlink_errors{gpu, counter, scope}``
  (``scope``: ``total`` since the driver loaded, ``run`` during this run's campaigns).
A figure the run could not measure is left out, never written as 0.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from pytest_nvlink.core.atomic import write_text_atomically
from pytest_nvlink.model import Node
from pytest_nvlink.model.host_link import worst_host_links
from pytest_nvlink.record.results import Results

PREFIX = "pytest_nvlink"
VERDICTS: tuple[str, ...] = ("PASS", "FAIL", "INCOMPLETE", "PARTIAL", "INTERRUPTED")


def render_metrics(results: Results, now: float | None = None) -> str:
    """The Prometheus text exposition of ``results`` (format 0.0.4, as the textfile collector reads it)."""
    registry = CollectorRegistry(auto_describe=True)
    host, suite = results.run.host, results.run.suite.name
    _verdict(registry, host, suite, results.verdict)
    stamp = Gauge(f"{PREFIX}_run_timestamp_seconds", "When the run ended (Unix time).", ["host"], registry=registry)
    stamp.labels(host).set(time.time() if now is None else now)
    _checks(registry, host, results)
    _figures(registry, host, results.run.node)
    _links(registry, host, results.run.node)
    return generate_latest(registry).decode("utf-8")


def write_metrics(results: Results, path: Path) -> None:
    write_text_atomically(path, render_metrics(results))


def _verdict(registry: CollectorRegistry, host: str, suite: str, verdict: str) -> None:
    gauge = Gauge(
        f"{PREFIX}_verdict",
        "1 for the run's verdict, 0 for the others.",
        ["host", "suite", "verdict"],
        registry=registry,
    )
    for name in dict.fromkeys([*VERDICTS, verdict]):
        gauge.labels(host, suite, name).set(1 if name == verdict else 0)


def _checks(registry: CollectorRegistry, host: str, results: Results) -> None:
    counts = Gauge(f"{PREFIX}_checks", "nvlink items by verdict outcome.", ["host", "outcome"], registry=registry)
    for outcome, count in sorted(Counter(item.outcome for item in results.items).items()):
        counts.labels(host, outcome).set(count)
    failed = Gauge(f"{PREFIX}_check_failed", "1 per failing nvlink item.", ["host", "check", "item"], registry=registry)
    for item in results.items:
        if item.outcome == "fail":
            failed.labels(host, item.check, item.nodeid).set(1)


def _figures(registry: CollectorRegistry, host: str, node: Node) -> None:
    bandwidth = Gauge(
        f"{PREFIX}_p2p_bandwidth_gbps",
        "P2P copy bandwidth per ordered pair, GB/s.",
        ["host", "src", "dst", "kind"],
        registry=registry,
    )
    latency = Gauge(
        f"{PREFIX}_p2p_latency_us", "P2P latency per ordered pair, us.", ["host", "src", "dst"], registry=registry
    )
    for m in node.measurements.p2p:
        if m.value is None:
            continue
        if m.kind == "latency":
            latency.labels(host, str(m.src), str(m.dst)).set(m.value)
        else:
            bandwidth.labels(host, str(m.src), str(m.dst), m.kind).set(m.value)
    busbw = Gauge(
        f"{PREFIX}_collective_busbw_gbps",
        "Collective bus bandwidth (nccl-tests' definition), GB/s.",
        ["host", "op", "size_bytes", "ranks"],
        registry=registry,
    )
    for c in node.measurements.collectives:
        if c.busbw_gbps is not None and c.error is None:
            busbw.labels(host, c.op, str(c.size_bytes), str(c.world_size)).set(c.busbw_gbps)
    host_link = Gauge(
        f"{PREFIX}_host_link_gbps",
        "Host<->device bandwidth per GPU and direction (pinned host memory), GB/s.",
        ["host", "gpu", "direction"],
        registry=registry,
    )
    for (gpu, direction), figure in worst_host_links(node.measurements.host_link).items():  # as the judge reads
        if figure.value is not None and figure.error is None:
            host_link.labels(host, str(gpu), direction).set(figure.value)


def _links(registry: CollectorRegistry, host: str, node: Node) -> None:
    active = Gauge(f"{PREFIX}_nvlinks_active", "Active NVLinks per GPU.", ["host", "gpu"], registry=registry)
    errors = Gauge(
        f"{PREFIX}_nvlink_errors",
        "NVLink error counters summed over a GPU's links.",
        ["host", "gpu", "counter", "scope"],
        registry=registry,
    )
    for gpu in node.gpus:
        if gpu.nvlinks is None:
            continue  # not read: left out, never 0
        active.labels(host, str(gpu.index)).set(sum(1 for link in gpu.nvlinks if link.active))
        for scope, per_link in (
            ("total", [link.errors for link in gpu.nvlinks]),
            ("run", [link.errors_run for link in gpu.nvlinks]),
        ):
            for counter, value in _summed(per_link).items():
                errors.labels(host, str(gpu.index), counter, scope).set(value)


def _summed(per_link: Iterable[dict[str, int] | None]) -> dict[str, int]:
    """Each counter summed over the links that read it; a counter no link read is absent."""
    total: dict[str, int] = {}
    for counters in per_link:
        for name, value in (counters or {}).items():
            total[name] = total.get(name, 0) + value
    return dict(sorted(total.items()))
