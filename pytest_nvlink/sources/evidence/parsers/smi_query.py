"""Parser for ``nvidia-smi -q`` (whole, ``-i N``, or ``grep -C`` windows of it).

Read for inventory (product name, UUID, bus id, driver), the PCIe link (generation and width) and
the NVSwitch ``Fabric`` section (State, Status, CliqueId, ClusterUUID and its Health block), as
documented in the nvidia-smi manual page (https://docs.nvidia.com/deploy/nvidia-smi/index.html).
Indentation is not trusted: pasted blocks arrive shifted left and drivers pad the key column to
different widths, so sections are tracked by their header words, and a ``--`` line from
``grep -C`` ends the current section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pytest_nvlink.model import MIG_DISABLED, MIG_ENABLED, FabricInfo, normalize_pci_bus_id
from pytest_nvlink.sources.evidence.merge import SMI_GPU_KEYS
from pytest_nvlink.sources.evidence.parsers.common import (
    ParseError,
    bad_line,
    is_non_finite,
    non_finite_error,
    split_lines,
)
from pytest_nvlink.sources.evidence.parsers.registry import Format, Into, register

_GPU_HEADER = re.compile(r"GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_KEY_VALUE = re.compile(r"([A-Za-z][\w ./()-]*?)\s*:\s*(.*)")
_SECTIONS = {"pcie generation": "gen", "link width": "width", "fabric": "fabric", "health": "health", "mig mode": "mig"}
# Keys whose meaning depends on the section they are in; elsewhere (Clocks, ...) they are ignored.
_SECTION_KEYS = {
    ("gen", "max"): "pcie_gen_max",
    ("gen", "current"): "pcie_gen_current",
    ("gen", "device max"): "pcie_gen_gpu_max",
    ("width", "max"): "pcie_width_max",
    ("width", "current"): "pcie_width_current",
    ("fabric", "state"): "fabric_state",
    ("fabric", "status"): "fabric_status",
    ("fabric", "cliqueid"): "clique_id",
    ("fabric", "clusteruuid"): "cluster_uuid",
    ("health", "bandwidth"): "health_bandwidth",
    ("health", "route recovery in progress"): "health_route_recovery",
    ("health", "route unhealthy"): "health_route_unhealthy",
    ("health", "access timeout recovery"): "health_access_timeout",
    ("health", "incorrect configuration"): "health_incorrect_configuration",
    ("health", "partition assigned"): "health_partition_assigned",
    ("health", "summary"): "health_summary",
    ("mig", "current"): "mig_current",
    ("mig", "pending"): "mig_pending",
}
# MIG Mode's Current and Pending as printed; N/A where the GPU has no MIG (NVML answers NotSupported).
_MIG_VALUES = {"enabled": MIG_ENABLED, "disabled": MIG_DISABLED, "n/a": MIG_DISABLED}
NO_MIG_NOTE = "nvidia-smi -q prints MIG Mode N/A: the GPU has no MIG, so it cannot be in MIG mode: taken as disabled"
_ANYWHERE_KEYS = {
    "product name": "name",
    "gpu uuid": "uuid",
    "bus id": "pci_bus_id",
    "minor number": "minor_number",
}


@dataclass(frozen=True)
class SmiGpu:
    bus_id: str  # from the "GPU 00000000:18:00.0" header; "" for a Fabric block pasted without it
    ordinal: int  # position among the GPU blocks of the text
    values: dict[str, str]  # keys: values of _SECTION_KEYS and _ANYWHERE_KEYS, raw text as printed
    index: int | None = None  # a bare Fabric block: the GPU index the text states ("-i 3", "GPU 3"), if any
    line_no: int = 0  # the line of its "GPU <bus id>" header, or of a bare Fabric block's "Fabric" title

    def get(self, key: str) -> str | None:
        value = self.values.get(key)
        return None if value is None or value in ("N/A", "") else value


@dataclass(frozen=True)
class SmiQuery:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[SmiGpu, ...]
    notes: tuple[tuple[int, str], ...] = ()

    @property
    def complete(self) -> bool:
        """Every attached GPU has its block here, so block order is NVML index order."""
        return self.attached_gpus is not None and self.attached_gpus == len(self.gpus)


@dataclass
class _Builder:
    driver: str | None = None
    cuda: str | None = None
    attached: int | None = None
    gpus: list[SmiGpu] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)
    orphan_lines: list[int] = field(default_factory=list)


def parse(text: str) -> SmiQuery:
    out = _Builder()
    current: dict[str, str] | None = None
    section: str | None = None
    for line_no, raw in enumerate(split_lines(text), start=1):
        line = raw.strip()
        if not line or line.startswith("="):
            continue
        if line == "--":  # grep -C window boundary: what follows is out of context
            section = None
            continue
        if header := _GPU_HEADER.fullmatch(line):
            current = {}
            out.gpus.append(SmiGpu(header.group(1), len(out.gpus), current, line_no=line_no))
            section = None
            continue
        match = _KEY_VALUE.fullmatch(line)
        if match is None:
            section = _SECTIONS.get(line.lower())  # a section title; sections not listed reset the context
            continue
        key, value = match.group(1).strip().lower(), match.group(2).strip()
        if not value and key in _SECTIONS:  # a section title some drivers print with a colon ("MIG Mode :")
            section = _SECTIONS[key]
            continue
        if _read_top_level(key, value, raw, line_no, out):
            continue
        name = _SECTION_KEYS.get((section or "", key)) or _ANYWHERE_KEYS.get(key)
        if name is None:
            continue
        _check_value(name, match.group(1).strip(), value, raw, line_no)
        if current is None:
            out.orphan_lines.append(line_no)
            continue
        current.setdefault(name, value)
    if not out.gpus:
        out.gpus.extend(_bare_fabric_blocks(text))
    if not out.gpus:
        raise ParseError("expected nvidia-smi -q output with 'GPU 00000000:xx:00.0' blocks; none found", 0)
    out.notes.extend(_lost_health_lines(out.gpus))
    if out.orphan_lines and out.gpus[0].bus_id:
        out.notes.append(
            (out.orphan_lines[0], f"{len(out.orphan_lines)} line(s) before any 'GPU <bus id>' header; not read")
        )
    return SmiQuery(out.driver, out.cuda, out.attached, tuple(out.gpus), tuple(out.notes))


def _check_value(name: str, label: str, value: str, raw: str, line_no: int) -> None:
    """Refuse a value no nvidia-smi prints for the key: a number that is not finite, an unknown MIG mode."""
    if is_non_finite(value):
        raise non_finite_error(label, value, raw, line_no)
    if name in ("mig_current", "mig_pending") and value.lower() not in _MIG_VALUES:
        raise bad_line(f"'{label} : Enabled', 'Disabled' or 'N/A' under MIG Mode", raw, line_no)


_STATED_INDEX = re.compile(r"(?:nvidia-smi\b.*\s-i\s*|^\s*GPU\s+)(\d+)\b")


def _bare_fabric_blocks(text: str) -> list[SmiGpu]:
    """The Fabric sections of ``nvidia-smi -q`` pasted without the GPU header: one block per GPU."""
    blocks: list[SmiGpu] = []
    section: str | None = None
    stated: int | None = None
    current: dict[str, str] = {}
    for line_no, raw in enumerate(split_lines(text), start=1):
        line = raw.strip()
        if match := _STATED_INDEX.search(line):
            stated = int(match.group(1))
            continue
        if line.lower() == "fabric":
            current, section = {}, "fabric"
            blocks.append(SmiGpu("", len(blocks), current, stated, line_no))
            stated = None
            continue
        match = _KEY_VALUE.fullmatch(line)
        if match is None:
            section = _SECTIONS.get(line.lower()) if blocks else None
            continue
        name = _SECTION_KEYS.get((section or "", match.group(1).strip().lower()))
        if name is not None and is_non_finite(match.group(2)):
            raise non_finite_error(match.group(1).strip(), match.group(2), raw, line_no)
        if name is not None and blocks:
            current.setdefault(name, match.group(2).strip())
    return [block for block in blocks if "fabric_state" in block.values]


def _read_top_level(key: str, value: str, raw: str, line_no: int, out: _Builder) -> bool:
    if key == "driver version":
        out.driver = value
    elif key == "cuda version":
        out.cuda = value
    elif key == "attached gpus":
        if not value.isdigit():
            raise bad_line("'Attached GPUs : N'", raw, line_no)
        out.attached = int(value)
    else:
        return False
    return True


# --- the evidence format: how this output is told apart and merged ----------------------------------

KIND = "nvidia_smi_q"
_M = re.MULTILINE


def _detect(text: str) -> str | None:
    # A Fabric section on its own: the title, then its State and Status (or CliqueId/ClusterUUID) keys.
    bare = r"^\s*Fabric\s*$\s*^\s*State\s*:[^\n]*$\s*^\s*(?:Status|CliqueId|ClusterUUID)\s*:"
    if re.search(bare, text, _M):
        return KIND
    if re.search(r"NVSMI LOG|^\s*Attached GPUs\s*:", text, _M) or re.search(
        r"^\s*GPU\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$", text, _M
    ):
        return KIND
    return None


def _merge(into: Into, result: SmiQuery) -> None:
    """Inventory, PCIe link and fabric facts; a GPU that cannot be placed is a note, not a guess."""
    merger, file = into.merger, into.part.name
    if result.driver_version:
        merger.node_fact("driver_version", result.driver_version, file, "driver version")
    if result.complete:
        merger.count(len(result.gpus), file)
    if result.gpus and not result.gpus[0].bus_id:
        _merge_bare_fabric(into, result)
        return
    for gpu in result.gpus:
        index = gpu.ordinal if result.complete else _int_or_none(gpu.get("minor_number"))
        if index is None:
            into.note(f"GPU {gpu.bus_id}: not every GPU is in the file and no Minor Number; not read")
            continue
        if not result.complete:
            into.note(f"GPU {gpu.bus_id} taken as GPU {index} from its Minor Number (partial nvidia-smi -q)")
            merger.lower_bound(index + 1, file)
        _merge_gpu(into, index, gpu)


def _merge_gpu(into: Into, index: int, gpu: SmiGpu) -> None:
    merger, file = into.merger, into.part.name
    merger.gpu_fact(index, "name", gpu.get("name"), file)
    merger.gpu_fact(index, "uuid", gpu.get("uuid"), file)
    merger.gpu_fact(index, "pci_bus_id", normalize_pci_bus_id(gpu.bus_id), file)
    merger.note("platform", file)
    for key in SMI_GPU_KEYS[1:]:
        merger.gpu_fact(index, key, _int_or_none((gpu.get(key) or "").removesuffix("x")), file)
    fabric = _fabric(gpu)
    if fabric is not None:
        merger.gpu_fact(index, "fabric", fabric, file)
    _merge_mig(into, index, gpu)


def _merge_mig(into: Into, index: int, gpu: SmiGpu) -> None:
    """MIG Mode's Current and Pending, as the live probe records nvmlDeviceGetMigMode's answer."""
    printed = [gpu.values.get(key) for key in ("mig_current", "mig_pending")]
    if None in printed:
        return
    current, pending = (_MIG_VALUES[str(value).lower()] for value in printed)
    into.merger.gpu_fact(index, "mig_mode_current", current, into.part.name)
    into.merger.gpu_fact(index, "mig_mode_pending", pending, into.part.name)
    if "n/a" in {str(value).lower() for value in printed}:
        into.merger.unknown_reason(f"gpu{index}.mig_mode", NO_MIG_NOTE)


def _merge_bare_fabric(into: Into, result: SmiQuery) -> None:
    """Fabric blocks without the GPU header: placed where the text states the GPU, otherwise judged node-wide."""
    merger, file = into.merger, into.part.name
    merger.lower_bound(len(result.gpus), file)  # one block per GPU: at least that many GPUs
    for gpu in result.gpus:
        fabric = _fabric(gpu)
        where = into.part.where(gpu.line_no)
        if fabric is None:
            continue
        if gpu.index is not None:
            into.note(f"{where}: nvidia-smi -q Fabric block without its GPU header, taken as GPU {gpu.index}")
            merger.lower_bound(gpu.index + 1, file)
            merger.gpu_fact(gpu.index, "fabric", fabric, file)
            merger.note("platform", file)
            continue
        fault = fabric_fault(gpu)
        into.note(f"{where}: nvidia-smi -q Fabric block of a GPU whose index is not stated: {fault or 'healthy'}")
        if fault is not None:
            # Some GPU of this node reports it; which one the text does not say, so no GPU's fabric passes.
            merger.unknown_reason("fabric.unplaced_fault", f"{fault} (nvidia-smi -q Fabric block at {where})")
            merger.note("platform", file)


# The Health block's flags printed True/False (True is the problem): the key, the label nvidia-smi prints,
# and the name the live probe decodes NVML's mask to (the model's FabricInfo.health_problems).
_HEALTH_FLAGS: dict[str, tuple[str, str]] = {
    "health_route_recovery": ("Route Recovery in progress", "route_recovery"),
    "health_route_unhealthy": ("Route Unhealthy", "route_unhealthy"),
    "health_access_timeout": ("Access Timeout Recovery", "access_timeout_recovery"),
}


_HEALTH_KEYS: tuple[str, ...] = tuple(name for (section, _), name in _SECTION_KEYS.items() if section == "health")


_MASK_FLAGS: tuple[str, ...] = (*_HEALTH_FLAGS, "health_incorrect_configuration")


def _lost_health_lines(gpus: list[SmiGpu]) -> list[tuple[int, str]]:
    """GPUs whose Fabric Health block lacks a line another GPU's block prints: a line lost or garbled.

    One driver prints the same Health lines for every GPU, so a block without one of them lost it; an
    unread flag must not read as a healthy one.
    """
    printed = {key for gpu in gpus for key in _HEALTH_KEYS if key in gpu.values}
    notes = []
    for gpu in gpus:
        # The mask's flags come from one NVML field and are printed together, even in a block on its own.
        expected = printed | (set(_MASK_FLAGS) if any(key in gpu.values for key in _MASK_FLAGS) else set())
        missing = [key for key in _HEALTH_KEYS if key in expected and key not in gpu.values]
        if missing and any(key in gpu.values for key in _HEALTH_KEYS):
            names = ", ".join(key.removeprefix("health_").replace("_", " ") for key in missing)
            who = f"GPU {gpu.bus_id}" if gpu.bus_id else "the Fabric block"
            notes.append(
                (
                    gpu.line_no,
                    f"{who}: its Fabric Health block lacks line(s) other GPUs print ({names}); they are not read",
                )
            )
    return notes


def fabric_fault(gpu: SmiGpu) -> str | None:
    """What a Fabric block reports that is not healthy, in its own words; None when nothing is."""
    state, status = gpu.get("fabric_state") or "", gpu.get("fabric_status")
    faults = [] if state.lower() == "completed" else [f"State {state}"]
    faults += [f"Status {status}"] if status is not None and status.lower() != "success" else []
    bandwidth = gpu.get("health_bandwidth")
    faults += [f"Health Bandwidth {bandwidth}"] if bandwidth is not None and bandwidth.lower() != "full" else []
    faults += [f"Health {problem}" for problem in _health_faults(gpu)]
    summary = gpu.get("health_summary")
    if summary is not None and summary.lower() != "healthy":
        faults.append(f"Health Summary {summary}")
    return ", ".join(faults) or None


def _health_faults(gpu: SmiGpu) -> list[str]:
    """The Health block's flags that report a fault, in nvidia-smi's words ("Route Unhealthy True")."""
    found = [
        f"{label} {value}"
        for key, (label, _) in _HEALTH_FLAGS.items()
        if (value := gpu.get(key)) is not None and value.lower() != "false"
    ]
    config = gpu.get("health_incorrect_configuration")
    if config is not None and config.lower() not in ("false", "none"):
        found.append(f"Incorrect Configuration {config}")
    return found


def _int_or_none(value: object) -> int | None:
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _snake(value: str) -> str:
    return re.sub(r"\W+", "_", value.strip().lower()).strip("_")


def _fabric(gpu: SmiGpu) -> FabricInfo | None:
    """The Fabric section as the model spells NVML's fabric info; None where the section is absent."""
    state = gpu.get("fabric_state")
    if state is None:
        return None
    bandwidth = (gpu.get("health_bandwidth") or "").lower()
    clique = gpu.get("clique_id")
    return FabricInfo(
        state=_snake(state),
        status=_snake(gpu.get("fabric_status") or "") or None,
        clique_id=int(clique, 0) if clique and re.fullmatch(r"0x[0-9a-fA-F]+|\d+", clique) else None,
        cluster_uuid=gpu.get("cluster_uuid"),
        degraded_bandwidth=True if "degraded" in bandwidth else False if bandwidth == "full" else None,
        health_summary=_snake(gpu.get("health_summary") or "") or None,
        health_problems=_health_problems(gpu),
    )


def _health_problems(gpu: SmiGpu) -> list[str] | None:
    """The Health block as the model's decoded fabric health; None where the block says nothing."""
    values = {key: _snake(gpu.get(key) or "") for key in (*_HEALTH_FLAGS, "health_bandwidth", "health_summary")}
    values["config"] = _snake(gpu.get("health_incorrect_configuration") or "")
    values["partition"] = _snake(gpu.get("health_partition_assigned") or "")
    if not any(values.values()):
        return None
    problems = [name for key, (_, name) in _HEALTH_FLAGS.items() if values[key] not in ("", "false", "not_supported")]
    if "degraded" in values["health_bandwidth"]:
        problems.insert(0, "degraded_bandwidth")
    if values["config"] not in ("", "none", "not_supported"):
        problems.append(f"incorrect_configuration:{values['config']}")
    if values["partition"] == "false":
        problems.append("partition_not_assigned")
    elif values["partition"] not in ("", "true", "not_supported"):  # a value nobody can read counts against it
        problems.append(f"partition_assigned:{values['partition']}")
    if values["health_summary"] not in ("", "healthy", "not_supported"):
        problems.append(f"summary:{values['health_summary']}")
    return problems


FORMAT = register(
    Format(
        name="smi_query",
        kinds=(KIND,),
        order=20,
        detect=_detect,
        parse=parse,
        families=("inventory", "platform"),
        label="nvidia-smi -q",
        merge=_merge,
        start=re.compile(r"^\s*=+\s*NVSMI LOG\s*=+\s*$"),
        commands=(r"nvidia-smi\b",),
    )
)
