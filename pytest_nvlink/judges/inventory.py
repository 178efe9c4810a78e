"""Inventory verdicts: the node has the GPUs, models and driver the suite describes."""

from __future__ import annotations

from pytest_nvlink.judges.context import Context, gpu_properties, per_gpu
from pytest_nvlink.model import Gpu
from pytest_nvlink.verdict import Verdict, failed, measured_properties, passed, unknown


def gpu_count(ctx: Context) -> Verdict:
    expected, found = ctx.suite.gpu_count, ctx.usable_gpus()
    props = measured_properties(found, str(expected), "GPUs", suite=ctx.suite_at("suite.gpu_count"))
    if ctx.auto_mismatch is not None:
        return failed(ctx.auto_mismatch, props)
    if ctx.no_inventory():
        return unknown("the GPU inventory", "the evidence files list no GPUs", props)
    duplicates = ctx.duplicates()
    if duplicates:
        return failed(
            f"expected {expected} GPUs ({ctx.suite_where('suite.gpu_count')}), found {found} usable: "
            f"{'; '.join(d.text() for d in duplicates)}; likely cause: one GPU's section pasted twice or a file "
            "edited by hand (take the capture again), or on a live probe a driver fault (reboot and probe again)",
            props,
        )
    if ctx.node.probe_errors and found == 0:
        reason = "; ".join(ctx.node.probe_errors)
        return failed(f"expected {expected} GPUs, found 0: {reason}", props)
    problems = ctx.gpu_problems()
    lost = [f"GPU {g.index}: {problems[g.index]}" for g in ctx.node.gpus if g.index in problems]
    if lost:
        return failed(
            f"expected {expected} usable GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}: "
            f"{'; '.join(lost)}; likely cause: a GPU fell off the bus (dmesg Xid 79) — reset or reboot, then check it",
            props,
        )
    partial = ctx.partial_gpu_list()
    if partial and len(ctx.node.gpus) <= expected:
        # A lower bound above the suite's count still proves too many GPUs (judged below).
        listed = ctx.node.gpu_list
        source = listed.source if listed else "unknown"
        return unknown(
            "the GPU count",
            partial,
            [*props, ("gpu_list", "lower bound"), ("gpu_list_source", source)],
        )
    if found < expected and ctx.empty_trays():
        return failed(
            f"expected {expected} GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}: "
            f"{ctx.empty_trays_text()}; likely cause: the host is down, drained or not in the job's allocation",
            props,
        )
    if found < expected:
        return failed(
            f"expected {expected} GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}; likely cause: a GPU "
            "fell off the bus (dmesg Xid 79), is hidden by CUDA_VISIBLE_DEVICES or the container runtime, or was "
            "not passed through to this VM",
            props,
        )
    if found == expected:
        return passed(f"{found} GPUs found as expected", props)
    # Only the exact count passes: more GPUs than the suite describes is another shape of node.
    return failed(
        f"expected {expected} GPUs ({ctx.suite_where('suite.gpu_count')}), found {found}: this node is not the "
        f"shape suite {ctx.suite.name} describes; pick the matching suite (--nvlink-suite=auto)",
        props,
    )


@per_gpu
def gpu_model(ctx: Context, gpu: Gpu) -> Verdict:
    index = gpu.index
    accepted = " | ".join(ctx.suite.gpu_models)
    props = measured_properties(gpu.name, accepted, "model", suite=ctx.suite_at("suite.gpu_models"))
    props += gpu_properties(gpu)
    if gpu.name is None:
        return unknown(
            f"the model of GPU {index}",
            ctx.node.unknown_reason(f"gpu{index}.name", "the source does not name it"),
            props,
        )
    if not ctx.suite.model_matches(gpu.name):
        return failed(
            f"GPU {index} is a {gpu.name!r}, not one of the models suite {ctx.suite.name} accepts ({accepted}, "
            f"{ctx.suite_where('suite.gpu_models')}); pick the matching suite or --nvlink-suite=auto",
            props,
        )
    return passed(f"GPU {index} is a {gpu.name}", props)


def driver(ctx: Context) -> Verdict:
    # Every suite needs the NVIDIA driver; no key sets a version, so the [suite] table is the expectation.
    props = measured_properties(
        ctx.node.driver_version, "a loaded NVIDIA driver", "version", suite=ctx.suite_at("suite")
    )
    if ctx.node.driver_version is None:
        return unknown(
            "the NVIDIA driver version",
            ctx.node.unknown_reason("driver_version", "the source does not report it"),
            props,
        )
    return passed(f"driver {ctx.node.driver_version}", props)
