"""``--nvlink-quick``: the health check a Slurm prolog or NHC's ``HealthCheckProgram`` runs on every node.

It judges facts only: inventory, NVLink state and lifetime error counters, topology paths, P2P
status, fabric registration and, on a rack suite, the trays and their clique. Nothing is measured,
so no bandwidth, collective, baseline, PCIe-under-load or send/recv check runs and torch is never
imported; a replayed snapshot's figures from a measurement campaign (the error growth during it,
PCIe sampled under load) are left out too, so a quick replay judges what a quick live run would.
The output is one line per failure and one summary line, for a drain reason or a log grep.
"""

from __future__ import annotations

import dataclasses
import re

from pytest_nvlink.model import Measurements, Node

# The shipped check modules quick mode collects; the others (bandwidth, collectives, baseline) are never imported.
QUICK_AREAS: frozenset[str] = frozenset({"inventory", "nvlink", "topology", "platform", "rack"})
QUICK_MODULES: frozenset[str] = frozenset(f"test_{area}.py" for area in QUICK_AREAS)
# In a quick module but measured: the PCIe generation drops at idle, and send/recv between trays is a figure.
MEASURED_CHECKS: frozenset[str] = frozenset({"test_pcie_link", "test_rack_sendrecv"})
# unknown_reasons keys of figures a measurement campaign records.
_CAMPAIGN_REASONS = re.compile(r"\.(errors_run|pcie_gen_loaded)\b")


def keeps(area: str | None, check: str) -> bool:
    """Whether a quick run keeps an nvlink check of ``area`` (the marker's) named ``check``."""
    return area in QUICK_AREAS and check not in MEASURED_CHECKS


def facts_only(node: Node) -> Node:
    """``node`` without what a measurement campaign recorded: figures, error growth, PCIe under load."""
    gpus = []
    for gpu in node.gpus:
        links = None if gpu.nvlinks is None else [dataclasses.replace(link, errors_run=None) for link in gpu.nvlinks]
        gpus.append(dataclasses.replace(gpu, nvlinks=links, pcie_gen_loaded=None))
    reasons = {key: why for key, why in node.unknown_reasons.items() if not _CAMPAIGN_REASONS.search(key)}
    return dataclasses.replace(
        node, gpus=gpus, measurements=Measurements(), error_window_s=None, unknown_reasons=reasons
    )


def one_line(text: str) -> str:
    """The message on one line: a multi-line crash text keeps its first line, runs of spaces collapse."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return " ".join(first.split()) or "failed without a message"


def failure_line(host: str, name: str, message: str) -> str:
    """``nvlink FAIL <host> <check[param]>: <sentence>``: one grep-able line per failing check."""
    return f"nvlink FAIL {host} {name}: {one_line(message)}"


def summary_line(host: str, verdict: str, failed: int, total: int, suite: str) -> str:
    """The last line: the node's verdict, how many checks failed of how many, and the suite."""
    return f"nvlink {verdict} {host}: {failed} of {total} quick checks failed (suite {suite})"
