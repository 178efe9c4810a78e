"""Report text: the header, JUnit suite properties and the terminal summary tables.

Reads the run and the results record (``record.py``: the verdicts carried in the reports'
``user_properties``, plain objects), so it needs no pytest import.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tabulate import tabulate

from pytest_nvlink.model import CollectiveMeasurement, Node
from pytest_nvlink.record.audit import AuditTally, no_verdict_line
from pytest_nvlink.record.items import ItemLog, ItemResult, collective_outcomes
from pytest_nvlink.record.results import nccl_transport_line, source_text
from pytest_nvlink.record.run import BASELINE_NOT_COLLECTED, Run
from pytest_nvlink.record.unknowns import recorded_unknowns
from pytest_nvlink.report.matrices import p2p_lines, topology_lines

NCCL_ENV_VARS: tuple[str, ...] = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE")


_source_text = source_text  # the record's; this name stays for the header and JUnit lines below


def header_lines(run: Run) -> list[str]:
    node, suite = run.node, run.suite
    model = node.gpus[0].name if node.gpus else "no GPU"
    lines = [
        f"nvlink suite: {suite.name} ({suite.file}) - {suite.description}",
        f"nvlink SKU thresholds: {run.thresholds.name} ({', '.join(str(f) for f in run.thresholds.files)})",
        f"nvlink source: {_source_text(run)}; host {run.host}; driver {node.driver_version or 'unknown'}"
        f"; CUDA {node.cuda_driver_version or 'unknown'}; {len(node.gpus)} x {model}",
    ]
    if run.auto_note:
        lines.append(f"nvlink: {run.auto_note}")
    inherited = [f"{name}={os.environ[name]}" for name in NCCL_ENV_VARS if name in os.environ]
    if inherited:
        lines.append("nvlink inherited NCCL settings: " + " ".join(inherited))
    lines += [f"nvlink probe problem: {problem}" for problem in node.probe_errors]
    if node.source == "evidence":
        from pytest_nvlink.record.audit import evidence_header_line

        lines.append(f"nvlink {evidence_header_line(node)}")
    if run.baseline is None:
        return [*lines, f"nvlink: not collected: {BASELINE_NOT_COLLECTED}"]
    from pytest_nvlink.record.baseline import baseline_header_lines  # only a run with a baseline needs it

    return lines + baseline_header_lines(run)


def suite_properties(run: Run) -> list[tuple[str, str]]:
    node = run.node
    props = [
        ("nvlink_suite", run.suite.name),
        ("nvlink_suite_file", str(run.suite.file)),
        ("nvlink_thresholds", ",".join(str(f) for f in run.thresholds.files)),
        ("nvlink_source", _source_text(run)),
        ("host", run.host),
        ("driver_version", node.driver_version or "unknown"),
        ("cuda_driver_version", node.cuda_driver_version or "unknown"),
        ("gpu_count", str(len(node.gpus))),
    ]
    for gpu in node.gpus:
        props.append((f"gpu{gpu.index}", f"{gpu.name} uuid={gpu.uuid} serial={gpu.serial} pci={gpu.pci_bus_id}"))
    if run.baseline is None:
        return props
    from pytest_nvlink.record.baseline import baseline_suite_properties

    return props + baseline_suite_properties(run)


def check_table(stats: Mapping[str, Sequence[Any]]) -> str:
    """One row per check function: passed/failed/skipped counts and the first failure's message."""
    return check_table_of(ItemLog().add_all(stats).results())


def check_table_of(items: Iterable[ItemResult]) -> str:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    first_failure: dict[str, str] = {}
    for item in items:
        counts[item.check][item.pytest_outcome] += 1
        if item.failed and item.check not in first_failure:
            first_failure[item.check] = _short(item.message)
    rows = [
        [name, c["passed"], c["failed"] + c["error"], c["skipped"], first_failure.get(name, "")]
        for name, c in sorted(counts.items())
        if sum(c.values())
    ]
    return tabulate(rows, headers=["check", "passed", "failed", "skipped", "first failure"], tablefmt="simple")


def _short(message: str, limit: int = 110) -> str:
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def collective_table(run: Run, items: Sequence[ItemResult]) -> str:
    """Every size measured; only the row a verdict judged gets its mark, read from the results record's ``items``."""
    results = run.node.measurements.collectives
    judged = collective_outcomes(results, items)
    rows = []
    for m in sorted(results, key=lambda m: (m.op, m.size_bytes)):
        floor = run.thresholds.value(f"collectives.{m.op}.busbw_min_gbps")
        verdict = "error" if m.error else ("WRONG DATA" if m.correct is False else "")
        if not verdict:
            verdict = _mark(judged.get(id(m)), m, floor)
        rows.append(
            [m.op, f"{m.size_bytes / (1 << 20):g}", m.world_size, m.time_us, m.algbw_gbps, m.busbw_gbps, floor, verdict]
        )
    headers = ["collective", "size MiB", "ranks", "time us", "algbw GB/s", "busbw GB/s", "min busbw", "verdict"]
    return tabulate(rows, headers=headers, tablefmt="simple", floatfmt=".1f")


def _mark(outcome: str | None, m: CollectiveMeasurement, floor: float | None) -> str:
    """The row's verdict as recorded: "ok" for a pass; a failure reads BELOW when its figure is under the floor
    shown beside it, else FAIL (its ranks do not cover the suite, say); a row no verdict judged is a sweep row."""
    if outcome is None:
        return "(sweep)"
    if outcome == "pass":
        return "ok"
    if outcome != "fail":
        return ""  # waived or without evidence: the check table says why
    below = floor is not None and m.busbw_gbps is not None and m.busbw_gbps < floor
    return "BELOW" if below else "FAIL"


def measurement_lines(run: Run, items: Sequence[ItemResult]) -> list[str]:
    measurements = run.node.measurements
    lines: list[str] = []
    if any(m.kind == "unidirectional" for m in measurements.p2p):
        lines += p2p_lines(run, items)
    if measurements.collectives:
        lines += [*collective_table(run, items).splitlines(), ""]
    transports = nccl_transport_line(run)
    if transports:
        lines += [transports, ""]
    host_link = host_link_line(run)
    if host_link:
        lines += [host_link, ""]
    return lines


_HOST_LINK_SHORT = {"h2d": "h2d", "d2h": "d2h", "bidir_h2d": "bidir h2d", "bidir_d2h": "bidir d2h"}


def host_link_line(run: Run) -> str | None:
    """One line: each direction's range over the GPUs, and the lowest figure against its floor."""
    by_direction: dict[str, list[tuple[float, int]]] = {}
    for m in run.node.measurements.host_link:
        if m.value is not None and m.error is None:
            by_direction.setdefault(m.direction, []).append((m.value, m.gpu))
    if not by_direction:
        return None
    ranges = ", ".join(f"{_HOST_LINK_SHORT.get(d, d)} {min(v)[0]:.1f}-{max(v)[0]:.1f}" for d, v in by_direction.items())
    lowest = []
    for direction, values in by_direction.items():
        key = "host_link.bidir_min_gbps" if direction.startswith("bidir") else f"host_link.{direction}_min_gbps"
        floor = run.thresholds.value(key)
        value, gpu = min(values)
        if floor is not None and value < floor:
            lowest.append(f"GPU {gpu} {_HOST_LINK_SHORT.get(direction, direction)} {value:.1f} < {floor:g}")
    below = f"; below the floor: {'; '.join(lowest)}" if lowest else ""
    return f"host link per GPU (GB/s, pinned host memory, copy engine): {ranges}{below}"


def summary_lines(
    run: Run, stats: Mapping[str, Sequence[Any]], tally: AuditTally | None = None, items: list[ItemResult] | None = None
) -> list[str]:
    if items is None:  # the results record's items, as the JSON and HTML read them
        items = ItemLog().add_all(stats).results()
    lines: list[str] = []
    if run.node.gpus:
        lines += topology_lines(run)
    lines += measurement_lines(run, items)
    lines += check_table_of(items).splitlines()
    lines += error_counter_lines(run.node)
    unknowns = recorded_unknowns(run.node, run.thresholds)
    if unknowns:
        lines += ["", "recorded unknowns (not proven by this run):", *(f"  - {line}" for line in unknowns)]
    if run.node.source == "evidence":
        lines += ["", *evidence_coverage(run.node).splitlines()]
    if run.baseline is not None:
        from pytest_nvlink.record.baseline import baseline_section, baseline_summary_lines

        lines += baseline_summary_lines(baseline_section(run, items))
    return [*lines, "", *audit_lines(stats, tally)]


def audit_lines(stats: Mapping[str, Sequence[Any]], tally: AuditTally | None) -> list[str]:
    """The partial-audit counts (from the run's tally, else from the reports the terminal collected)."""
    if tally is None:
        tally = AuditTally()
        for reports in stats.values():
            for report in reports:
                tally.add(report)
    return [tally.line(), no_verdict_line(tally)] if tally.judged_nothing() else [tally.line()]


def error_counter_lines(node: Node) -> list[str]:
    """NVLink error counters: the increase during this run's campaigns, and the lifetime totals apart."""
    totals = _nonzero_counters(node, "errors")
    lines = [""]
    if node.error_window_s is not None:
        grown = _nonzero_counters(node, "errors_run")
        lines.append(
            f"NVLink error counter increase during this run ({node.error_window_s:.0f} s of measurements): "
            + (grown or "none")
        )
    elif totals:
        lines.append("NVLink error counters: lifetime totals only (no measurement campaign in this session)")
    if totals:
        lines.append(f"NVLink error counter lifetime totals (since driver load): {totals}")
    return lines if len(lines) > 1 else []


def _nonzero_counters(node: Node, attribute: str) -> str:
    found = []
    for gpu in node.gpus:
        for link in gpu.nvlinks or []:
            counters: dict[str, int] = getattr(link, attribute) or {}
            if not any(counters.values()):
                continue  # nearly every link of a healthy domain: nothing to show
            shown = ", ".join(f"{name} {value}" for name, value in sorted(counters.items()) if value)
            if shown:
                found.append(f"GPU {gpu.index} link {link.link}: {shown}")
    return "; ".join(found)


FILES_SHOWN = 3  # a folder of burn-in logs can hold hundreds of files: list a few, count the rest


def evidence_coverage(node: Node) -> str:
    """Which evidence file fed which checks; an empty cell means those checks had no evidence."""
    from pytest_nvlink.record.coverage import coverage_rows

    rows = [[family, checks, _file_cell(files)] for family, checks, files in coverage_rows(node)]
    return "\n".join([tabulate(rows, headers=["evidence", "checks", "files"], tablefmt="simple"), *file_notes(node)])


def _file_cell(files: str) -> str:
    """One file per line, at most ``FILES_SHOWN`` of them, so no line grows with the number of files."""
    names = [name for name in files.split(", ") if name]
    if not names:
        return "(none)"
    if len(names) > FILES_SHOWN:
        names = [*names[:FILES_SHOWN], f"… and {len(names) - FILES_SHOWN} more ({len(names)} files)"]
    return "\n".join(names)


def file_notes(node: Node) -> list[str]:
    """Per evidence file: what it contributed and every note about damage or about being left out."""
    from pytest_nvlink.record.coverage import file_coverage

    lines: list[str] = []
    quiet: list[str] = []  # files without notes: a few are listed, the rest counted by what they gave
    for file, families, notes in file_coverage(node):
        contributed = ", ".join(families) or "contributed nothing"
        if notes or len(quiet) < FILES_SHOWN:
            lines.append(f"{file}: {contributed}")
            lines += [f"  note: {note}" for note in notes]
        if not notes:
            quiet.append(contributed)
    if len(quiet) > FILES_SHOWN:
        rest = quiet[FILES_SHOWN:]
        kinds = ", ".join(f"{count} x {what}" for what, count in sorted(Counter(rest).items()))
        lines.append(f"… and {len(rest)} more file(s) without notes ({kinds})")
    return ["", "evidence files (what each contributed; notes on damage and on files left out):", *lines]
