"""Build the example snapshots shipped in ``snapshots/``.

Run ``python tests/data/make_snapshots.py [OUT_DIR]`` from the repository root; the default
output is ``snapshots/``. The nodes are hand-built to look like what ``probe_node`` records on
each machine, and tests/test_snapshot.py checks the committed files still match these builders.
"""

from __future__ import annotations

import copy
import itertools
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from pytest_nvlink.model import (
    CampaignSpan,
    CollectiveMeasurement,
    Environment,
    EventWindow,
    FabricInfo,
    Gpu,
    Measurements,
    NcclAudit,
    Node,
    NvLinkInfo,
    P2PMeasurement,
    P2PStatus,
    PairPath,
    TransportChannel,
)
from pytest_nvlink.model.document import save_snapshot
from pytest_nvlink.model.host_link import HostLinkMeasurement

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the rack builders live next to this file
import rack_snapshots as rack

H100_NAME = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
H100_BUS_IDS = (
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
)
# The four NVSwitches of an HGX H100 baseboard; each GPU spreads its 18 links 5/4/4/5 over them.
NVSWITCH_BUS_IDS = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
LINKS_PER_SWITCH = (5, 4, 4, 5)
H100_LINK_GBPS = 26.562  # per link, per direction, as NVML's GET_SPEED field reports (MBps / 1000)
ZERO_ERRORS = {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0, "ecc_data": 0}
NO_BW_MODE = {"nvlink_bw_mode": "NVML: Function Not Found"}  # R550 predates nvmlSystemGetNvlinkBwMode


def _uuid(host: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}.gpu{index}"))


def _switch_links() -> list[NvLinkInfo]:
    switches = [bus for bus, count in zip(NVSWITCH_BUS_IDS, LINKS_PER_SWITCH, strict=True) for _ in range(count)]
    return [
        NvLinkInfo(
            link=number,
            active=True,
            version=4,
            speed_gbps=H100_LINK_GBPS,
            remote_type="switch",
            remote_pci_bus_id=bus,
            errors=dict(ZERO_ERRORS),
        )
        for number, bus in enumerate(switches)
    ]


def _h100(host: str, index: int, bus_id: str) -> Gpu:
    return Gpu(
        index=index,
        name=H100_NAME,
        uuid=_uuid(host, index),
        pci_bus_id=bus_id,
        serial=f"16542230{18500 + index * 37:05d}",
        vbios="96.00.74.00.01",
        numa_node=0 if index < 4 else 1,
        pcie_gen_current=5,
        pcie_gen_max=5,
        pcie_gen_gpu_max=5,
        pcie_width_current=16,
        pcie_width_max=16,
        nvlinks=_switch_links(),
        fabric=FabricInfo(state="completed", status="success", clique_id=0, degraded_bandwidth=False),
        virtualization_mode="none",
    )


def _all_p2p(count: int, **statuses: str) -> list[P2PStatus]:
    return [P2PStatus(src=a, dst=b, **statuses) for a, b in itertools.permutations(range(count), 2)]


def _base_node(host: str, gpus: list[Gpu]) -> Node:
    return Node(
        source="live",
        host=host,
        driver_version=DRIVER,
        cuda_driver_version="12.4",
        nvml_version=f"12.{DRIVER}",
        hypervisor=False,
        gpus=gpus,
        # x86 hosts: GPU memory is no NUMA node, and nvmlDeviceGetNumaNodeId says so.
        unknown_reasons={
            **NO_BW_MODE,
            **{f"gpu{gpu.index}.gpu_memory_numa_node": "NVML: Not Supported" for gpu in gpus},
        },
    )


def healthy_h100() -> Node:
    """An HGX H100 8-GPU node as it should be: NV18 everywhere, fabric up, no errors."""
    host = "hgx-h100-01"
    node = _base_node(host, [_h100(host, i, bus) for i, bus in enumerate(H100_BUS_IDS)])
    node.paths = [PairPath(a=a, b=b, path="NV18") for a, b in itertools.combinations(range(8), 2)]
    node.p2p = _all_p2p(8, read="ok", write="ok", nvlink="ok", atomics="ok")
    return node


def degraded_h100() -> Node:
    """The same node gone wrong: two links down, P2P off by regkey, Fabric Manager not started."""
    node = copy.deepcopy(healthy_h100())
    node.host = "hgx-h100-02"
    for gpu in node.gpus:
        gpu.uuid = _uuid(node.host, gpu.index)
        gpu.fabric = FabricInfo(state="not_started")  # status is meaningless until completed
    gpu3_links = node.gpus[3].nvlinks
    assert gpu3_links is not None
    for number in (16, 17):
        gpu3_links[number] = NvLinkInfo(link=number, active=False)
    gpu5_links = node.gpus[5].nvlinks
    assert gpu5_links is not None
    gpu5_links[7].errors = {**ZERO_ERRORS, "replay": 3, "crc_flit": 12}
    node.paths = [
        PairPath(a=a, b=b, path="NV16" if 3 in (a, b) else "NV18") for a, b in itertools.combinations(range(8), 2)
    ]
    for status in node.p2p or []:
        if {status.src, status.dst} == {2, 6}:
            status.read = status.write = "disabled_by_regkey"
    return node


def vm_pcie_h100() -> Node:
    """A passthrough VM guest: NVML sees no NVLink, P2P only over PCIe."""
    host = "vm-h100-guest"
    bus_ids = [f"0000:{bus:02x}:00.0" for bus in (0x11, 0x12, 0x13, 0x14, 0x91, 0x92, 0x93, 0x94)]
    gpus = [_h100(host, i, bus) for i, bus in enumerate(bus_ids)]
    node = _base_node(host, gpus)
    node.hypervisor = True
    for gpu in gpus:
        gpu.virtualization_mode = "passthrough"
        gpu.nvlinks = []
        gpu.fabric = None
        # What a guest's fabric query answers is not confirmed on hardware; record it as unknown.
        node.unknown_reasons[f"gpu{gpu.index}.fabric"] = "NVML: Unknown Error"
    node.paths = [
        PairPath(a=a, b=b, path="PHB" if (a < 4) == (b < 4) else "SYS") for a, b in itertools.combinations(range(8), 2)
    ]
    node.p2p = _all_p2p(8, read="ok", write="ok", nvlink="not_supported", atomics="not_supported")
    return node


# --- measurements ------------------------------------------------------------------------------
# Figures follow published HGX H100 numbers: 371-377 GB/s unidirectional, 740-749 bidirectional,
# ~37 GB/s with P2P disabled (NVIDIA/nccl#1264); all_reduce ~480 GB/s busbw with NVLS and
# ~370 for other collectives (NVIDIA/nccl-tests#212). Sizes match suites/h100-8gpu.toml.
MIB = 1 << 20
COPIED = 256 * MIB * 20  # p2p_size_mib x p2p_iterations
RING_CHANNELS = 4


def _p2p_figures(
    src: int, dst: int, uni: float, bidi: float, latency: float, **counters: object
) -> list[P2PMeasurement]:
    shared = {"can_access_peer": True, "source": "torch", **counters}
    return [
        P2PMeasurement(src, dst, "unidirectional", uni, "GB/s", bytes_copied=COPIED, **shared),  # type: ignore[arg-type]
        P2PMeasurement(src, dst, "bidirectional", bidi, "GB/s", **shared),  # type: ignore[arg-type]
        P2PMeasurement(src, dst, "latency", latency, "us", **shared),  # type: ignore[arg-type]
    ]


def _nvlink_pair(src: int, dst: int) -> list[P2PMeasurement]:
    wobble = (src * 7 + dst * 3) % 8
    return _p2p_figures(
        src,
        dst,
        370.0 + wobble,
        741.0 + wobble,
        2.4 + 0.1 * (wobble % 4),
        nvlink_bytes=COPIED + 4 * MIB * wobble,
        pcie_bytes=MIB,
    )


def _collective(op: str, size_mib: int, busbw: float, world: int = 8, nvls: bool = True) -> CollectiveMeasurement:
    factor = {"all_reduce": 2 * (world - 1) / world}.get(op, 1.0 if op == "broadcast" else (world - 1) / world)
    algbw = busbw / factor
    size = size_mib * MIB
    return CollectiveMeasurement(
        op,
        size,
        world,
        round(size / (algbw * 1e3), 1),
        round(algbw, 2),
        busbw,
        correct=True,
        backend="nccl",
        rank_gpus=list(range(world)),
        nvls_available=nvls,
        source="torch.distributed",
    )


def _ring(transport: str = "P2P", detail: str = "P2P/CUMEM") -> list[TransportChannel]:
    return [
        TransportChannel(c, r, r, (r + 1) % 8, (r + 1) % 8, transport, detail)
        for c in range(RING_CHANNELS)
        for r in range(8)
    ]


def healthy_measurements() -> Measurements:
    p2p = [m for src, dst in itertools.permutations(range(8), 2) for m in _nvlink_pair(src, dst)]
    collectives = [
        _collective("all_reduce", 4096, 478.6),
        _collective("all_gather", 4096, 362.3),
        _collective("reduce_scatter", 4096, 363.1),
        _collective("broadcast", 1024, 351.7),
        _collective("all_to_all", 1024, 342.5),
    ]
    audit = NcclAudit(channels=_ring(), nvls_available=True, nvls_channels=16, source="nccl.hgx-h100-01.*")
    return Measurements(p2p=p2p, collectives=collectives, nccl=audit)


def degraded_measurements() -> Measurements:
    """Pair 2<->6 copies through host memory (P2P off), so PCIe counters carry the bytes."""
    m = healthy_measurements()
    m.p2p = [x for x in m.p2p if {x.src, x.dst} != {2, 6}]
    for src, dst in ((2, 6), (6, 2)):
        m.p2p += _p2p_figures(
            src, dst, 37.2 - 0.4 * (src == 6), 41.8, 23.6, nvlink_bytes=2 * MIB, pcie_bytes=COPIED + 16 * MIB
        )
    m.collectives[0] = _collective("all_reduce", 4096, 352.4)
    shm = [TransportChannel(c, a, a, b, b, "SHM", "SHM/direct/direct") for c in (5, 6) for a, b in ((2, 6), (6, 2))]
    m.nccl = NcclAudit(channels=_ring() + shm, nvls_available=True, nvls_channels=16, source="nccl.hgx-h100-02.*")
    return m


def vm_measurements() -> Measurements:
    """A guest without NVLink: PCIe-rate copies, NVLink counters not readable, NCCL over SHM."""
    no_nvlink = {"pcie_bytes": COPIED, "counters_note": "NVLink throughput counters: NVML: Not Supported"}
    p2p = [
        m
        for s, d in itertools.permutations(range(8), 2)
        for m in _p2p_figures(s, d, 26.1 if (s < 4) == (d < 4) else 19.8, 44.0, 14.8, **no_nvlink)
    ]
    collectives = [
        _collective(op, size, bw, nvls=False)
        for op, size, bw in (
            ("all_reduce", 4096, 38.9),
            ("all_gather", 4096, 21.4),
            ("reduce_scatter", 4096, 21.0),
            ("broadcast", 1024, 20.2),
            ("all_to_all", 1024, 17.6),
        )
    ]
    audit = NcclAudit(
        channels=_ring("SHM", "SHM/direct/direct"), nvls_available=False, nvls_channels=0, source="nccl.vm-h100-guest.*"
    )
    return Measurements(p2p=p2p, collectives=collectives, nccl=audit)


# Pinned host memory on the GPU's own NUMA node, copy engine, PCIe Gen5 x16: ~55 GB/s each way as nvbandwidth
# measures on 8xH200 (55.4/55.1, stas00/ml-engineering), a little less per direction while both directions run.
HOST_LINK_GBPS = {"h2d": 55.3, "d2h": 54.8, "bidir_h2d": 47.6, "bidir_d2h": 46.9}
# The degraded node's GPU 3 copies host->device at 14.2 GB/s, as one GPU of the H100 VM in NVIDIA/nvbandwidth#6.
SLOW_HOST_LINK = (3, "h2d", 14.2)


def host_link_figures(node: Node, slow: tuple[int, str, float] | None = None) -> list[HostLinkMeasurement]:
    figures = []
    for gpu in node.gpus:
        for direction, value in HOST_LINK_GBPS.items():
            measured = round(value - 0.1 * (gpu.index % 4), 1)
            if slow is not None and (gpu.index, direction) == slow[:2]:
                measured = slow[2]
            figures.append(
                HostLinkMeasurement(
                    gpu.index,
                    direction,
                    measured,
                    method="ce",
                    bytes_copied=COPIED,
                    host_numa_node=gpu.numa_node,
                    source="torch",
                )
            )
    return figures


CAMPAIGN_S = 412.5  # how long the measurement campaign of these nodes ran


def _watched_campaign(node: Node) -> None:
    """What the live run records around its measurements: counter increases and PCIe under load."""
    node.error_window_s = CAMPAIGN_S
    for gpu in node.gpus:
        gpu.pcie_gen_loaded = gpu.pcie_gen_max  # the link trains to its maximum under load
        for link in gpu.nvlinks or []:
            if link.active:
                link.errors_run = dict(ZERO_ERRORS)
    # The run listened for Xid events on every GPU from its start to its end and heard none.
    node.xid_events = []
    node.event_window = listened_window(len(node.gpus))
    if node.host == "hgx-h100-02":
        # The degraded node's marginal link also errs during the run, not only in its history.
        links = node.gpus[5].nvlinks
        assert links is not None
        links[7].errors_run = {**ZERO_ERRORS, "replay": 3, "crc_flit": 12}


def listened_window(gpu_count: int, started: str = "2026-11-20T09:54:41.20Z") -> EventWindow:
    """An Xid-free NVML event window over the whole run: the P2P campaign, then the collectives."""
    p2p_end = 12.0 + CAMPAIGN_S * 0.8
    return EventWindow(
        source="NVML Xid events",
        start=started,
        length_s=CAMPAIGN_S + 31.5,
        gpus=list(range(gpu_count)),
        campaigns=[CampaignSpan("p2p", 12.0, p2p_end), CampaignSpan("collectives", p2p_end, 12.0 + CAMPAIGN_S)],
    )


def with_run_record(node: Node) -> Node:
    """What a live run of the h100-8gpu suite records since snapshot schema 2: conditions and environment."""
    p2p = {"size_mib": "256", "iterations": "20", "warmup": "3", "pair_mode": "serial"}
    for m in node.measurements.p2p:
        m.conditions = {"iterations": "200", "pair_mode": "serial"} if m.kind == "latency" else dict(p2p)
    for c in node.measurements.collectives:
        c.conditions = {"iterations": "20", "warmup": "5", "backend": c.backend or "nccl"}
    node.environment = Environment(
        versions={"nccl": "2.21.5", "torch": "2.13.0", "cuda_runtime": "12.4", "kernel": "5.15.0-105-generic"},
        suite="h100-8gpu",
        suite_file="suites/h100-8gpu.toml",
        thresholds=["thresholds/nvswitch-common.toml", "thresholds/h100-sxm.toml"],
        outcome=None,  # demo nodes are built, not saved by a run: never picked from a baseline folder
        saved_utc="2026-11-20T10:02:00Z",
    )
    return node


def _measured(build: Callable[[], Node], measure: Callable[[], Measurements]) -> Callable[[], Node]:
    def both() -> Node:
        node = build()
        node.measurements = measure()
        node.measurements.host_link = host_link_figures(node, SLOW_HOST_LINK if node.host == "hgx-h100-02" else None)
        _watched_campaign(node)
        return with_run_record(node)

    both.__doc__ = build.__doc__
    return both


SNAPSHOTS: dict[str, Callable[[], Node]] = {
    "h100-8gpu-healthy.json": _measured(healthy_h100, healthy_measurements),
    "h100-8gpu-degraded.json": _measured(degraded_h100, degraded_measurements),
    "h100-8gpu-vm-pcie.json": _measured(vm_pcie_h100, vm_measurements),
    "gb200-nvl72-healthy.json": rack.healthy_rack,
    "gb200-nvl72-faulty.json": rack.faulty_rack,
}
# Rack variants only the tests replay (tests/data/rack/): one fault each.
RACK_TEST_SNAPSHOTS: dict[str, Callable[[], Node]] = {
    "gb200-nvl72-missing-tray.json": rack.missing_tray_rack,
    "gb200-nvl72-net-between-trays.json": rack.net_between_trays_rack,
    "gb200-nvl72-slow-pair.json": rack.slow_pair_rack,
}


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    out_dir = Path(argv[1]) if len(argv) > 1 else here.parents[1] / "snapshots"
    targets = [(out_dir, SNAPSHOTS)] + ([(here / "rack", RACK_TEST_SNAPSHOTS)] if len(argv) <= 1 else [])
    for folder, builders in targets:
        for file_name, build in builders.items():
            save_snapshot(build(), folder / file_name)
            print(folder / file_name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
