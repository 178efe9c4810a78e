"""MIG mode: a GPU in MIG mode has no P2P with another GPU, and a threshold set may require MIG off (or on).

Source: NVIDIA Multi-Instance GPU User Guide, "Application Considerations"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/): in MIG mode "GPU to GPU P2P (both PCIe and
NVLink) is not supported". So every P2P, collective or NVLink-path failure on such a GPU names MIG first;
the other causes a check names follow it. The mode set by ``nvidia-smi -mig`` is pending until the GPU is
reset (the guide's "Enable MIG Mode": a reset applies it), which is why NVML reports current and pending.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_nvlink.judges.context import Context, gpu_properties, per_gpu
from pytest_nvlink.model import MIG_DISABLED, MIG_ENABLED, Gpu, Node
from pytest_nvlink.verdict import Verdict, failed, measured_properties, passed, unknown

MIG_KEY = "inventory.mig"
# inventory.mig value -> the MIG mode it requires of every GPU.
REQUIRED_MODE: dict[str, str] = {"off": MIG_DISABLED, "on": MIG_ENABLED}


def mig_cause(node: Node, indices: Iterable[int]) -> str | None:
    """The likely cause to name first where a P2P, collective or NVLink-path check fails on GPUs in MIG mode."""
    gpus = [gpu for index in dict.fromkeys(indices) if (gpu := node.gpu(index)) is not None]
    enabled = [gpu.index for gpu in gpus if gpu.mig_mode_current == MIG_ENABLED]
    if not enabled:
        return None
    cause = (
        f"{_gpus_text(enabled)} {'is' if len(enabled) == 1 else 'are'} in MIG mode, which has no GPU-to-GPU P2P "
        f"over NVLink or PCIe — disable it (`nvidia-smi -i {enabled[0]} -mig 0`) and reset the GPU"
    )
    pending = [index for index in enabled if (gpu := node.gpu(index)) and gpu.mig_mode_pending == MIG_DISABLED]
    if pending:
        cause += f" ({_gpus_text(pending)}: MIG disabled is pending, a GPU reset applies it: `nvidia-smi -r`)"
    return cause


def with_mig_cause(node: Node, indices: Iterable[int], cause: str) -> str:
    """``cause``, after MIG where one of the GPUs is in MIG mode (then MIG is the likely cause, the rest the others)."""
    first = mig_cause(node, indices)
    return cause if first is None else f"{first}; otherwise {cause}"


def mig_note(node: Node, indices: Iterable[int]) -> str:
    """``"; likely cause: <MIG>"`` for a reason or message that names no cause yet, or ``""`` without MIG."""
    cause = mig_cause(node, indices)
    return "" if cause is None else f"; likely cause: {cause}"


@per_gpu
def gpu_mig(ctx: Context, gpu: Gpu) -> Verdict:
    """The GPU's MIG mode, now and after its next reset, is the one ``inventory.mig`` requires."""
    threshold = ctx.thresholds.get(MIG_KEY)
    if threshold is None:
        return ctx.missing_threshold(MIG_KEY)
    wanted = REQUIRED_MODE[str(threshold.value)]
    shown = f"{gpu.mig_mode_current or 'unknown'} (pending {gpu.mig_mode_pending or 'unknown'})"
    props = measured_properties(shown, f"{wanted} (pending {wanted})", "MIG mode", threshold) + gpu_properties(gpu)
    index = gpu.index
    if gpu.mig_mode_current is None or gpu.mig_mode_pending is None:
        reason = ctx.node.unknown_reason(f"gpu{index}.mig_mode", "the source does not report it")
        return unknown(f"the MIG mode of GPU {index}", reason, props)
    if gpu.mig_mode_current != wanted:
        after = f" ({wanted} is pending: a GPU reset applies it)" if gpu.mig_mode_pending == wanted else ""
        return failed(
            f"GPU {index}: MIG mode is {gpu.mig_mode_current}{after}, but {threshold.where()} = "
            f"{threshold.value!r} requires it {wanted}; {_consequence(wanted, index)}",
            props,
        )
    if gpu.mig_mode_pending != wanted:
        return failed(
            f"GPU {index}: MIG mode is {wanted} now but {gpu.mig_mode_pending} is pending, applied at the next "
            f"GPU reset, and {threshold.where()} = {threshold.value!r} requires it {wanted}; "
            f"{_consequence(wanted, index)}",
            props,
        )
    return passed(f"GPU {index}: MIG mode {wanted}", props)


def _consequence(wanted: str, index: int) -> str:
    if wanted == MIG_DISABLED:
        return (
            "a GPU in MIG mode has no P2P with other GPUs (NVLink or PCIe) — disable it with "
            f"`nvidia-smi -i {index} -mig 0` and reset the GPU"
        )
    return f"enable it with `nvidia-smi -i {index} -mig 1` and reset the GPU, or drop {MIG_KEY} from the site file"


def _gpus_text(indices: list[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(str(index) for index in indices)
