"""NVLink error counters of one GPU: the increase during this run, and lifetime totals, each against its own keys.

NVML's counters only grow from driver load, so a total says nothing about when an error happened.
When the measurement campaign recorded the counters before and after (``NvLinkInfo.errors_run``
over ``Node.error_window_s`` seconds), that increase is judged against the per-run or per-second
limits; the lifetime totals are always reported and judged against the ``*_total_max`` keys. A
counter that a limit needs but the source did not read makes the check unknown, never zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from pytest_nvlink.config.thresholds import RUN_LIMIT_KIND, Threshold, Thresholds, error_run_key, error_total_key
from pytest_nvlink.model import ERROR_COUNTER_NAMES, NVLINK5_ERROR_COUNTER_NAMES, Gpu, Node, NvLinkInfo
from pytest_nvlink.verdict import Verdict, failed, measured_properties, passed, unknown


@dataclass(frozen=True)
class Finding:
    """One counter judged against one limit."""

    counter: str
    scope: str  # "total" | "run"
    value: float  # summed count, or errors per second for per_s_max limits
    limit: Threshold
    worst_link: int | None

    @property
    def over(self) -> bool:
        return bool(self.value > self.limit.value)


@dataclass
class _Tally:
    """What judging one GPU's counters found, by kind, before the verdict is worded."""

    findings: list[Finding]
    unread: list[str]  # "replay (run) on link(s) 3, 4" and the like
    impossible: list[str]
    missing_keys: list[str]
    waived_keys: list[str]


def judge_error_counters(
    thresholds: Thresholds, node: Node, gpu: Gpu, base: list[tuple[str, str]], *, measured_here: bool = False
) -> Verdict:
    """``measured_here``: this run measures the node (``Context.measures_node``), so no increase means no campaign."""
    links = [link for link in gpu.nvlinks or [] if link.active is not False]
    run = node.error_window_s is not None or any(link.errors_run is not None for link in gpu.nvlinks or [])
    tally = _Tally([], [], [], [], [])
    for counter in _counters_of(gpu):
        _judge(tally, thresholds, counter, "total", links, window=None)
        if run and counter in ERROR_COUNTER_NAMES:
            _judge(tally, thresholds, counter, "run", links, window=node.error_window_s)
    props = base + _counter_properties(gpu, run, node.error_window_s, tally)
    what = f"the NVLink error counters of GPU {gpu.index}"
    if tally.impossible:
        return failed(
            f"GPU {gpu.index}: impossible NVLink error counter value(s): {'; '.join(tally.impossible)}; the "
            "source is damaged or mis-parsed, so the counters cannot be judged",
            props + _summary_props(tally, thresholds),
        )
    # Errors that grew during this run say more than a total that may predate it: they lead the message.
    over = sorted((f for f in tally.findings if f.over), key=lambda f: f.scope != "run")
    if over:
        return failed(_over_message(gpu.index, over, tally, node.error_window_s), props + _limit_props(over[0]))
    if tally.missing_keys:
        keys = ", ".join(tally.missing_keys)
        return failed(
            f"GPU {gpu.index}: threshold set {thresholds.describe()} neither sets nor waives {keys}, so {what} "
            "cannot be judged; set them with a `# Source:` comment or waive them with a reason under [waive]",
            props + _summary_props(tally, thresholds),
        )
    if tally.unread:
        return unknown(what, f"not read: {'; '.join(tally.unread)}", props + _summary_props(tally, thresholds))
    if not tally.findings:
        reason = "every limit that applies is waived" + ("" if run else " and no increase during a run was recorded")
        return unknown(what, f"nothing was judged: {reason}", props + _summary_props(tally, thresholds))
    judged = "the increase during this run and the lifetime totals" if run else _totals_only(measured_here)
    waived = f"; waived: {', '.join(tally.waived_keys)}" if tally.waived_keys else ""
    return passed(f"GPU {gpu.index}: NVLink error counters within limits (judged: {judged}{waived})", props)


def _counters_of(gpu: Gpu) -> tuple[str, ...]:
    """The counters the GPU's driver reports: NVLink5 drivers print their own set instead of the older one.

    A GPU whose links report any NVLink5 counter is judged on that set, and on the older one as well only
    where it reports some of it too (DCGM's NVLink health watch reads the set that fits the GPU the same way).
    """
    read = {name for link in gpu.nvlinks or [] for name in link.errors or {}}
    if not read & set(NVLINK5_ERROR_COUNTER_NAMES):
        return ERROR_COUNTER_NAMES
    older = ERROR_COUNTER_NAMES if read & set(ERROR_COUNTER_NAMES) else ()
    return older + NVLINK5_ERROR_COUNTER_NAMES


def _totals_only(measured_here: bool) -> str:
    why = "no measurement campaign ran" if measured_here else "the source holds totals only"
    return f"lifetime totals only; no increase during a run was recorded ({why})"


def _judge(
    tally: _Tally, thresholds: Thresholds, counter: str, scope: str, links: list[NvLinkInfo], *, window: float | None
) -> None:
    key = error_total_key(counter) if scope == "total" else error_run_key(counter)
    limit = thresholds.get(key)
    if limit is None:
        (tally.waived_keys if thresholds.waiver(key) else tally.missing_keys).append(key)
        return
    total = scope == "total"
    values = {link.link: ((link.errors if total else link.errors_run) or {}).get(counter) for link in links}
    unread = [str(number) for number, value in values.items() if value is None] if None in values.values() else []
    if unread or not links:
        where = "no link reported" if not links else f"link(s) {', '.join(unread)}"
        where = f"all {len(links)} links" if links and len(unread) == len(links) else where
        tally.unread.append(f"{counter} ({scope}) on {where}")
        return
    negative = [f"link {n} {counter} {v}" for n, v in values.items() if v is not None and v < 0]
    if negative:
        tally.impossible.extend(negative)
        return
    read = cast("dict[int, int]", values)  # every link's counter was read (unread returned above)
    count = sum(read.values())
    worst = max(read, key=read.__getitem__)
    if scope == "run" and RUN_LIMIT_KIND[counter] == "per_s_max":
        if window is None or window <= 0:
            tally.unread.append(f"{counter} rate: the length of the measurement window was not recorded")
            return
        tally.findings.append(Finding(counter, scope, count / window, limit, worst))
        return
    tally.findings.append(Finding(counter, scope, count, limit, worst))


def _over_message(index: int, over: list[Finding], tally: _Tally, window: float | None) -> str:
    first = over[0]
    others = f" (also over: {', '.join(f'{f.counter} {f.scope}' for f in over[1:])})" if len(over) > 1 else ""
    where = f"{first.limit.where()}"
    if first.scope == "run" and first.limit.key.endswith("_per_s_max"):
        head = (
            f"GPU {index}: NVLink {first.counter} errors grew at {first.value:.1f}/s during this run's "
            f"{window:.0f} s of measurements (worst on link {first.worst_link}), above {first.limit.value}/s ({where})"
        )
    elif first.scope == "run":
        head = (
            f"GPU {index}: NVLink {first.counter} errors grew by {first.value:.0f} during this run (worst on link "
            f"{first.worst_link}), above {first.limit.value} ({where})"
        )
    else:
        head = (
            f"GPU {index}: NVLink {first.counter} errors {first.value:.0f} since the driver loaded (worst on link "
            f"{first.worst_link}) exceed {first.limit.value} ({where})"
        )
    return f"{head}{others}; likely cause: {_cause(first, tally)}"


def _cause(first: Finding, tally: _Tally) -> str:
    grew = next((f for f in tally.findings if f.counter == first.counter and f.scope == "run"), None)
    if first.scope == "total" and grew is not None and grew.value == 0:
        return (
            "the errors predate this run (the counters count from driver load and did not grow during the "
            "measurements): reload the driver or reboot to clear them and rerun; if they return, a marginal link "
            "(cable, connector or NVSwitch port)"
        )
    if first.scope == "total" and grew is None:
        return (
            "a marginal link (cable, connector or NVSwitch port); the total counts from driver load and no increase "
            "during a run was recorded, so rerun with the measurements (or watch `nvidia-smi nvlink -e` under load) "
            "to see whether it still grows, then plan a reseat/RMA"
        )
    return (
        "a marginal link (cable, connector or NVSwitch port): watch `nvidia-smi nvlink -e` under load and plan a "
        "reseat/RMA"
    )


def _summary_props(tally: _Tally, thresholds: Thresholds) -> list[tuple[str, str]]:
    """measured/expected and the first key involved, for a verdict that is not one limit exceeded."""
    measured = ", ".join(f"{f.counter} {f.scope} {f.value:g}" for f in tally.findings) or "unknown"
    expected = ", ".join(f"{f.counter} {f.scope} <= {f.limit.value:g}" for f in tally.findings)
    unread = "; ".join(tally.unread)
    props = [
        ("measured", measured + (f" (not read: {unread})" if unread else "")),
        ("expected", expected or "every counter read and within its limit"),
        ("unit", "NVLink errors (count; CRC run limits per second)"),
    ]
    if tally.findings:
        limit = tally.findings[0].limit
        return [*props, ("threshold_key", limit.key), ("threshold_file", str(limit.file))]
    key = (tally.missing_keys or tally.waived_keys or [error_total_key(ERROR_COUNTER_NAMES[0])])[0]
    waiver = thresholds.waiver(key)
    where = waiver.file if waiver is not None else thresholds.files[-1]
    return [*props, ("threshold_key", key), ("threshold_file", str(where))]


def _limit_props(finding: Finding) -> list[tuple[str, str]]:
    unit = "errors/s" if finding.limit.key.endswith("_per_s_max") else "errors"
    return measured_properties(finding.value, f"<= {finding.limit.value}", unit, finding.limit)


def _counter_properties(gpu: Gpu, run: bool, window: float | None, tally: _Tally) -> list[tuple[str, str]]:
    props: list[tuple[str, str]] = []
    for counter in _counters_of(gpu):
        for scope, attribute in (("total", "errors"), ("run", "errors_run")):
            read = [getattr(link, attribute) or {} for link in gpu.nvlinks or []]
            values = [counters[counter] for counters in read if counter in counters]
            if values:
                props.append((f"errors_{scope}_{counter}", str(sum(values))))
    props.append(("errors_judged", "run increase and lifetime totals" if run else "lifetime totals only"))
    if window is not None:
        props.append(("error_window_s", f"{window:g}"))
    if tally.waived_keys:
        props.append(("waived_keys", ", ".join(tally.waived_keys)))
    return props
