"""Every item's verdict for a node, computed by calling the shipped check functions directly (no pytest run)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from itertools import combinations, permutations
from types import ModuleType
from typing import Any

from conftest import as_recorded

from pytest_nvlink.checks import (
    test_bandwidth,
    test_collectives,
    test_inventory,
    test_nvlink,
    test_platform,
    test_topology,
)
from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.config.thresholds import load_thresholds
from pytest_nvlink.judges.context import Context
from pytest_nvlink.model import Node, gpu_id, pair_id
from pytest_nvlink.model.figures import RecordedMeasurements
from pytest_nvlink.plugin.kit import CheckKit, unknown_is
from pytest_nvlink.plugin.pairs import pair_sets
from pytest_nvlink.verdict import Outcome, Verdict

CHECK_MODULES: tuple[ModuleType, ...] = (
    test_inventory,
    test_nvlink,
    test_platform,
    test_topology,
    test_bandwidth,
    test_collectives,
)


def _checks() -> Iterator[tuple[str, Callable[..., None]]]:
    for module in CHECK_MODULES:
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("test_") and function.__module__ == module.__name__:
                yield name, function


def _params(ctx: Context, parameter: str) -> list[tuple[str, Any]]:
    count = ctx.suite.gpu_count
    if parameter == "nvlink_gpu_index":
        return [(gpu_id(i), i) for i in range(count)]
    if parameter == "nvlink_pair":
        return [(pair_id(a, b), (a, b)) for a, b in combinations(range(count), 2)]
    if parameter == "nvlink_ordered_pair":
        return [(pair_id(a, b), (a, b)) for a, b in permutations(range(count), 2)]
    if parameter in ("nvlink_pairs", "nvlink_ordered_pairs"):
        ordered, unknowns = parameter == "nvlink_ordered_pairs", unknown_is(ctx.node.source)
        sets = pair_sets(ctx.suite, ordered=ordered, unknown_is=unknowns)
        return [(pair_set.label, pair_set) for pair_set in sets]
    if parameter == "nvlink_collective":
        return [(op, op) for op in ctx.suite.measure.collectives]
    raise AssertionError(f"no parameter values for {parameter}")


def all_verdicts(node: Node, suite_name: str) -> dict[str, Outcome]:
    """Item id (``test_path[gpu0-gpu1]``) -> outcome, as the plugin would judge ``node`` against the suite."""
    suite = load_suite(suite_name)
    ctx = Context(node, suite, load_thresholds(suite.thresholds_ref))
    provider = RecordedMeasurements(node)
    fixtures: dict[str, Any] = {"nvlink_context": ctx, "nvlink_measurements": provider}
    mig_required = ctx.thresholds.value("inventory.mig")
    outcomes: dict[str, Outcome] = {}
    for name, function in _checks():
        arguments = list(inspect.signature(function).parameters)
        if "nvlink_mig_required" in arguments:
            if mig_required is None:
                continue  # the plugin collects test_gpu_mig only where the set gives inventory.mig
            fixtures["nvlink_mig_required"] = mig_required
        varying = [a for a in arguments if a not in fixtures and a not in ("nvlink_judge", "nvlink_check")]
        cases = _params(ctx, varying[0]) if varying else [("", None)]
        for case_id, value in cases:
            verdicts: list[Verdict] = []
            kit = CheckKit(ctx, provider, verdicts.append)
            kwargs = {**fixtures, "nvlink_judge": verdicts.append, "nvlink_check": kit}
            if varying:
                kwargs[varying[0]] = value
            function(**{a: kwargs[a] for a in arguments})
            assert len(verdicts) == 1, name
            outcomes[f"{name}[{case_id}]" if case_id else name] = as_recorded(verdicts[0], ctx).outcome
    return outcomes
