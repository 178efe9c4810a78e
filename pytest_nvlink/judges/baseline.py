"""Verdicts against the node's own last known good run: figures within a tolerance, facts unchanged.

A figure worse than the baseline by more than its ``[baseline]`` tolerance fails; an improvement is
reported, not failed. A figure measured under other conditions (size, iterations, pair mode,
backend) is not comparable and fails naming the condition. A fact the baseline did not record
(a schema-1 file lacks later fields) is listed as not compared; one this run cannot tell fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_nvlink.judges.baseline_match import Baseline, changes_text
from pytest_nvlink.judges.collectives import pick_collective
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import CollectiveMeasurement, Gpu, Node, P2PMeasurement
from pytest_nvlink.model.figures import worst_figure
from pytest_nvlink.model.host_link import HOST_LINK_DIRECTIONS, HostLinkMeasurement, worst_host_link
from pytest_nvlink.verdict import Verdict, failed, not_applicable, passed, unknown, waived

P2P_KINDS: tuple[str, ...] = ("unidirectional", "bidirectional", "latency")
_TOLERANCE_KEY = {
    "unidirectional": "baseline.p2p_drop_max_pct",
    "bidirectional": "baseline.p2p_drop_max_pct",
    "latency": "baseline.latency_rise_max_pct",
    "collective": "baseline.collective_drop_max_pct",
    # A host-link figure is a copy bandwidth like a P2P one, with the same run-to-run spread: the same tolerance.
    "host_link": "baseline.p2p_drop_max_pct",
}


@dataclass
class Figure:
    """One figure of this run and of the baseline, named for the message."""

    what: str  # "GPU 2 -> GPU 6: unidirectional" or "all_reduce busbw"
    family: str  # a key of _TOLERANCE_KEY
    now: float | None
    then: float | None
    unit: str
    conditions_now: dict[str, str] | None
    conditions_then: dict[str, str] | None
    lower_is_better: bool = False


def _baseline_or_problem(baseline: Baseline | None) -> Baseline | Verdict:
    if baseline is None:  # the checks are not collected without --nvlink-baseline; a custom caller gets a failure
        props = [("measured", "unknown"), ("expected", "a baseline"), ("unit", ""), ("baseline_key", "file")]
        return failed("no baseline was given (--nvlink-baseline)", [*props, ("baseline_file", "none")])
    if baseline.problem is not None:
        return failed(f"cannot compare with the baseline: {baseline.problem}", _props(baseline, "node", None, None))
    return baseline


def _props(baseline: Baseline, key: str, measured: object, expected: object, unit: str = "") -> list[tuple[str, str]]:
    return [
        ("measured", "unknown" if measured is None else str(measured)),
        ("expected", "unknown" if expected is None else str(expected)),
        ("unit", unit),
        ("baseline_key", key),
        ("baseline_file", str(baseline.file)),
    ]


def _unmatched(baseline: Baseline, *indices: int) -> str | None:
    return next((baseline.unmatched[i] for i in indices if i in baseline.unmatched), None)


def p2p_pair(
    context: Context, given: Baseline | None, src: int, dst: int, figures: dict[str, P2PMeasurement | None]
) -> Verdict:
    """Unidirectional, bidirectional and latency of one ordered pair against the baseline's same GPUs."""
    found = _baseline_or_problem(given)
    if isinstance(found, Verdict):
        return found
    baseline = found
    if not context.suite.pair_expects_nvlink(src, dst):
        return not_applicable(
            f"suite {context.suite.name} expects a PCIe path between GPU {src} and GPU {dst}; not measured"
        )
    lost = _unmatched(baseline, src, dst)
    if lost is not None:
        return failed(f"GPU {src} -> GPU {dst}: not compared: {lost}", _props(baseline, "gpus", None, None))
    old_src, old_dst = baseline.gpu_map[src], baseline.gpu_map[dst]
    compared = [
        Figure(
            f"GPU {src} -> GPU {dst}: {kind}",
            kind,
            _value(figures.get(kind)),
            _value(_baseline_p2p(baseline.node, old_src, old_dst, kind)),
            "us" if kind == "latency" else "GB/s",
            _conditions(figures.get(kind)),
            _conditions(_baseline_p2p(baseline.node, old_src, old_dst, kind)),
            lower_is_better=kind == "latency",
        )
        for kind in P2P_KINDS
    ]
    return _judge_figures(context, baseline, compared)


def _baseline_p2p(node: Node, src: int, dst: int, kind: str) -> P2PMeasurement | None:
    return worst_figure([m for m in node.measurements.p2p if (m.src, m.dst, m.kind) == (src, dst, kind)])


def _value(measurement: P2PMeasurement | None) -> float | None:
    return None if measurement is None or measurement.error else measurement.value


def _conditions(measurement: P2PMeasurement | CollectiveMeasurement | None) -> dict[str, str] | None:
    return None if measurement is None else measurement.conditions


def host_link(context: Context, given: Baseline | None, index: int, figures: list[HostLinkMeasurement]) -> Verdict:
    """Each direction of one GPU's host link against the baseline's same GPU (``baseline.p2p_drop_max_pct``)."""
    found = _baseline_or_problem(given)
    if isinstance(found, Verdict):
        return found
    baseline = found
    lost = _unmatched(baseline, index)
    if lost is not None:
        return failed(f"GPU {index}: host link not compared: {lost}", _props(baseline, "gpus", None, None))
    old = baseline.gpu_map[index]
    if not baseline.node.measurements.host_link:
        # As a fact a schema-1 file lacks: listed as not compared, not failed (the module's rule).
        return not_applicable(
            f"GPU {index}: the baseline ({baseline.label()}) recorded no host-link figures (saved before they were "
            "measured), so the host link is not compared; save a new baseline to compare it"
        )

    compared = []
    for direction in HOST_LINK_DIRECTIONS:
        now, then = (
            worst_host_link(figures, index, direction),
            worst_host_link(baseline.node.measurements.host_link, old, direction),
        )
        if now is None and then is None:
            continue  # neither run measured this direction: nothing to compare
        compared.append(
            Figure(
                f"GPU {index}: host link {direction}",
                "host_link",
                None if now is None or now.error else now.value,
                None if then is None or then.error else then.value,
                "GB/s",
                None if now is None else now.conditions,
                None if then is None else then.conditions,
            )
        )
    if not compared:
        return unknown(
            f"the host-link comparison of GPU {index}",
            "neither this run nor the baseline recorded a host-link figure for it",
            _props(baseline, "host_link", None, None, "GB/s"),
        )
    return _judge_figures(context, baseline, compared)


def collective(context: Context, given: Baseline | None, op: str, results: list[CollectiveMeasurement]) -> Verdict:
    """Bus bandwidth of one collective at the threshold's size against the baseline's figure at that size."""
    found = _baseline_or_problem(given)
    if isinstance(found, Verdict):
        return found
    baseline = found
    size_mib = int(context.thresholds.value(f"collectives.{op}.size_mib", 1024))
    now = pick_collective(op, size_mib, results)
    then = pick_collective(op, size_mib, baseline.node.measurements.collectives)

    def described(m: CollectiveMeasurement | None) -> dict[str, str] | None:
        if m is None:
            return None
        return {**(m.conditions or {}), "ranks": str(m.world_size), "size_mib": f"{m.size_bytes / (1 << 20):g}"}

    figure = Figure(
        f"{op} busbw",
        "collective",
        None if now is None or now.error else now.busbw_gbps,
        None if then is None or then.error else then.busbw_gbps,
        "GB/s",
        described(now),
        described(then),
    )
    return _judge_figures(context, baseline, [figure])


def _judge_figures(context: Context, baseline: Baseline, figures: list[Figure]) -> Verdict:
    problems: list[tuple[Figure, str, str, str]] = []  # (figure, sentence, tolerance key, its file)
    notes: list[str] = []
    props: list[tuple[str, str]] = []
    judged: list[tuple[Figure, str, str]] = []
    for figure in figures:
        threshold = context.thresholds.get(_TOLERANCE_KEY[figure.family])
        if threshold is None:
            continue  # waived (attach_baseline refuses a key neither set nor waived)
        judged.append((figure, threshold.key, str(threshold.file)))
        name = figure.what.split(": ")[-1].replace(" ", "_")
        props += [(f"{name}_measured", _shown(figure.now)), (f"{name}_baseline", _shown(figure.then))]
        problem, note = _compare(figure, float(threshold.value), threshold.where(), baseline)
        if problem:
            problems.append((figure, problem, threshold.key, str(threshold.file)))
        elif note:
            notes.append(note)
    if not judged:
        waiver = context.thresholds.waiver(_TOLERANCE_KEY[figures[0].family])
        assert waiver is not None
        return waived(waiver)
    first, key, file = (problems[0][0], problems[0][2], problems[0][3]) if problems else judged[0]
    props += [
        ("measured", _shown(first.now)),
        ("expected", _shown(first.then)),
        ("unit", first.unit),
        ("threshold_key", key),
        ("threshold_file", file),
        ("baseline_file", str(baseline.file)),
    ]
    if problems:
        message = "; ".join(p[1] for p in problems) + f"; {changes_text(context.node, baseline)}"
        if all(p[0].now is None for p in problems):
            # This run has none of the figures: unknown, worded as a plain failure where it counts as one.
            return unknown("the comparison", message, props, failure=message)
        return failed(message, props)
    # An improvement passes, and is carried where the summary and the JUnit report show it.
    props += [("baseline_improved", note) for note in notes]
    summary = "; ".join(notes) if notes else "within tolerance of the baseline"
    return passed(f"{summary} ({baseline.label()})", props)


def _shown(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.6g}"


def _compare(figure: Figure, limit: float, where: str, baseline: Baseline) -> tuple[str | None, str | None]:
    """(failure sentence, note) for one figure; both None when it is within the tolerance."""
    if figure.then is None:
        return f"{figure.what}: the baseline ({baseline.label()}) has no figure for it to compare with", None
    if figure.now is None:
        return (
            f"{figure.what}: not measured in this run (baseline {figure.then:.1f} {figure.unit}); "
            "see the check for this figure",
            None,
        )
    differ = _differing_conditions(figure.conditions_then, figure.conditions_now)
    if differ:
        return f"{figure.what}: not comparable with the baseline, measured under other conditions: {differ}", None
    if figure.then <= 0:
        return f"{figure.what}: the baseline figure {figure.then} {figure.unit} is not usable", None
    change = (figure.now - figure.then) / figure.then * 100.0
    worse = change if figure.lower_is_better else -change
    direction = "above" if change > 0 else "below"
    sentence = (
        f"{figure.what} {figure.now:.1f} {figure.unit}, {abs(change):.1f} % {direction} baseline "
        f"{figure.then:.1f} {figure.unit} ({baseline.label()})"
    )
    if worse > limit:
        return f"{sentence}; limit {limit:g} % ({where})", None
    if -worse > limit:
        return None, f"improved: {sentence}"
    return None, None


_CONDITION_NAMES = {
    "size_mib": "message size (MiB)",
    "iterations": "iterations",
    "warmup": "warm-up iterations",
    "pair_mode": "pair mode",
    "backend": "backend",
    "ranks": "ranks",
}


def _differing_conditions(then: dict[str, str] | None, now: dict[str, str] | None) -> str:
    """Conditions recorded on both sides that differ; one side unrecorded (schema 1, evidence) is no difference."""
    if then is None or now is None:
        return ""
    differ = [
        f"{_CONDITION_NAMES.get(key, key)} {then[key]} in the baseline, {now[key]} now"
        for key in sorted(set(then) & set(now))
        if then[key] != now[key]
    ]
    return ", ".join(differ)


Fact = tuple[str, str, object, object]  # (name, baseline_key, baseline value, this run's value)


def gpu_facts(context: Context, given: Baseline | None, index: int) -> Verdict:
    """Link count and speed, paths and P2P status from this GPU, fabric and PCIe link, against the baseline."""
    found = _baseline_or_problem(given)
    if isinstance(found, Verdict):
        return found
    baseline = found
    lost = _unmatched(baseline, index)
    if lost is not None or index not in baseline.gpu_map:
        reason = lost or f"GPU {index} is missing from this run"
        return failed(f"{reason}; not compared", _props(baseline, f"gpus[{index}]", None, None))
    facts = _facts(context.node, baseline, index)
    differing = [fact for fact in facts if fact[2] is not None and fact[3] != fact[2]]
    unrecorded = [name for name, _, then, now in facts if then is None and now is not None]
    if differing:
        _, key, then, now = differing[0]
        props = _props(baseline, key, now, then)
        changed = "; ".join(
            f"{name} {then} in the baseline, {'unknown' if now is None else now} now"
            for name, _, then, now in differing
        )
        changes = changes_text(context.node, baseline)
        message = f"GPU {index}: changed since the baseline ({baseline.label()}): {changed}; {changes}"
        if all(now is None for *_, now in differing):
            # This run cannot tell any of them: unknown, worded as a plain failure where it counts as one.
            unknown_now = ", ".join(name for name, *_ in differing)
            return unknown(f"GPU {index}'s {unknown_now}", None, props, failure=message)
        return failed(message, props)
    note = f"; not recorded in the baseline, not compared: {', '.join(unrecorded)}" if unrecorded else ""
    props = _props(baseline, "gpus", "same", "same")
    return passed(
        f"GPU {index}: {len(facts) - len(unrecorded)} fact(s) as in the baseline{note}",
        props + ([("baseline_not_compared", ", ".join(unrecorded))] if unrecorded else []),
    )


def _facts(node: Node, baseline: Baseline, index: int) -> list[Fact]:
    old_index = baseline.gpu_map[index]
    new_gpu, old_gpu = node.gpu(index), baseline.node.gpu(old_index)
    assert new_gpu is not None
    assert old_gpu is not None
    facts: list[Fact] = [(label, key, read(old_gpu), read(new_gpu)) for label, key, read in _GPU_FACTS]
    for other, old_other in sorted(baseline.gpu_map.items()):
        if other == index:
            continue
        if other > index:
            facts.append(
                (f"path to GPU {other}", "paths", baseline.node.path(old_index, old_other), node.path(index, other))
            )
        old_status, new_status = baseline.node.p2p_status(old_index, old_other), node.p2p_status(index, other)
        facts.append(
            (
                f"P2P status to GPU {other}",
                "p2p",
                _status_text(old_status) if old_status else None,
                _status_text(new_status) if new_status else None,
            )
        )
    return facts


def _status_text(status: object) -> str:
    return ", ".join(f"{cap} {getattr(status, cap)}" for cap in ("read", "write", "nvlink", "atomics"))


def _link_speeds(gpu: Gpu) -> str | None:
    if gpu.nvlinks is None:
        return None
    speeds = sorted({link.speed_gbps for link in gpu.nvlinks if link.active and link.speed_gbps is not None})
    return ", ".join(f"{speed:g}" for speed in speeds) + " GB/s" if speeds else "none"


def _fabric(gpu: Gpu) -> str | None:
    return None if gpu.fabric is None else f"{gpu.fabric.state}/{gpu.fabric.status}"


_GPU_FACTS: tuple[tuple[str, str, Callable[[Gpu], object]], ...] = (
    ("active NVLinks", "nvlinks", Gpu.active_link_count),
    ("NVLink speed", "nvlinks.speed_gbps", _link_speeds),
    ("fabric state", "fabric", _fabric),
    ("PCIe width", "pcie_width_current", lambda gpu: gpu.pcie_width_current),
    ("PCIe generation under load", "pcie_gen_loaded", lambda gpu: gpu.pcie_gen_loaded),
)
