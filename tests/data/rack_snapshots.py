"""GB200 NVL72 rack snapshots as ``python -m pytest_nvlink.launch rack`` writes them (built, deterministic).

18 compute trays of 4 GB200 GPUs merged tray by tray (GPU ``4 t + i`` is tray t's GPU i, with
``host``/``local_index``), each GPU with 18 NVLink5 links to the switch trays, fabric registration
completed in one clique of one cluster; measurements: all_reduce over 72 ranks, send/recv pairs in
the launcher's schedule (every pair within a tray, 3 peers in other trays per GPU) and the NCCL
channels of a ring through all ranks (P2P within a tray, P2P/MNNVL between trays).

Figures: all_reduce busbw 839 GB/s at 4 GiB (coreweave/nccl-tests README, GB200 NVL72, NCCL 2.26.2);
GPU-to-GPU ~770 GB/s (Azure/AI-benchmarking-guide issue #7); 53.125 GB/s per NVLink5 link as nvidia-smi
shows it on GB200 (NVIDIA/k8s-test-infra#371).
"""

from __future__ import annotations

import copy
import itertools
import uuid

from pytest_nvlink.measure.sendrecv import pair_schedule
from pytest_nvlink.model import (
    NVLINK5_ERROR_COUNTER_NAMES,
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
from pytest_nvlink.model.host_link import C2CInfo, C2CLink, HostLinkMeasurement

TRAYS = 18
PER_TRAY = 4
GPUS = TRAYS * PER_TRAY
LINKS = 18
LINK_GBPS = 53.125
NAME = "NVIDIA GB200"
DRIVER = "570.133.20"
# GB200 compute trays show their GPUs in four PCI domains (two Grace CPUs, two GPUs each).
BUS_IDS = ("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0")
CLIQUE = 32766
OTHER_CLIQUE = 32765
# NVLink 5: nvml.h marks the DL replay/recovery/CRC fields unsupported on Blackwell, so a GB200 reads this set.
ZERO = dict.fromkeys(NVLINK5_ERROR_COUNTER_NAMES, 0)
MIB = 1 << 20
SENDRECV_MIB = 512
ITERATIONS = 20
WRONG_CLIQUE_TRAY = 5
LINKS_DOWN_TRAY = 11
DOWN_LINKS = (16, 17)  # the two links to one NVLink switch tray
CAMPAIGN_S = 1260.0


def host_of(tray: int) -> str:
    return f"gb200-r07-c{tray + 1:02d}"


def _cluster(rack: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{rack}.nvl72"))


def _links() -> list[NvLinkInfo]:
    return [
        NvLinkInfo(
            link=n,
            active=True,
            version=5,
            speed_gbps=LINK_GBPS,
            remote_type="switch",
            errors=dict(ZERO),
            errors_run=dict(ZERO),
        )
        for n in range(LINKS)
    ]


def _gpu(tray: int, local: int, cluster: str) -> Gpu:
    host = host_of(tray)
    return Gpu(
        index=tray * PER_TRAY + local,
        name=NAME,
        uuid="GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}.gpu{local}")),
        pci_bus_id=BUS_IDS[local],
        cuda_index=local,
        serial=f"1654924{tray:02d}{local:04d}",
        vbios="97.00.A5.00.0B",
        numa_node=local // 2,
        nvlinks=_links(),
        fabric=FabricInfo(
            state="completed",
            status="success",
            clique_id=CLIQUE,
            cluster_uuid=cluster,
            degraded_bandwidth=False,
            health_summary="healthy",
        ),
        virtualization_mode="none",
        # Illustrative: ten C2C links at 45 GB/s each way make the 900 GB/s NVLink-C2C of NVIDIA's GB200 page.
        c2c=C2CInfo(link_count=C2C_LINKS, links=[C2CLink(n, True, C2C_LINK_GBPS) for n in range(C2C_LINKS)]),
        host=host,
        local_index=local,
    )


C2C_LINKS = 10
C2C_LINK_GBPS = 45.0


def host_links(gpus: list[Gpu]) -> list[HostLinkMeasurement]:
    """Each GPU's host link over NVLink-C2C, pinned Grace memory on the GPU's own NUMA node, copy engine."""
    figures = {"h2d": 352.4, "d2h": 318.7, "bidir_h2d": 176.9, "bidir_d2h": 171.3}
    return [
        HostLinkMeasurement(
            gpu.index,
            direction,
            round(value - 0.3 * (gpu.index % 3), 1),
            method="ce",
            bytes_copied=1 << 30,
            host_numa_node=gpu.numa_node,
            source="torch",
        )
        for gpu in gpus
        for direction, value in figures.items()
    ]


def _rack_node(trays: int = TRAYS) -> Node:
    rack = "rack-" + host_of(0)
    cluster = _cluster(rack)
    gpus = [_gpu(t, i, cluster) for t in range(trays) for i in range(PER_TRAY)]
    node = Node(
        source="live",
        host=rack,
        driver_version=DRIVER,
        cuda_driver_version="12.8",
        nvml_version=f"12.{DRIVER}",
        hypervisor=False,
        gpus=gpus,
        nvlink_bw_mode="full",
        paths=[],
        p2p=[],
    )
    for t in range(trays):
        base = t * PER_TRAY
        for a, b in itertools.combinations(range(PER_TRAY), 2):
            node.paths.append(PairPath(a=base + a, b=base + b, path="NV18"))  # type: ignore[union-attr]
        for a, b in itertools.permutations(range(PER_TRAY), 2):
            status = P2PStatus(src=base + a, dst=base + b, read="ok", write="ok", nvlink="ok", atomics="ok")
            node.p2p.append(status)  # type: ignore[union-attr]
    for gpu in gpus:
        # GB200 GPUs reach Grace over NVLink-C2C; what NVML reports as their PCIe link is not modelled here.
        for field in ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max"):
            node.unknown_reasons[f"gpu{gpu.index}.{field}"] = "not modelled in this built example"
    node.error_window_s = CAMPAIGN_S
    # The run listened for Xid events on every GPU of every tray and heard none.
    node.xid_events = []
    node.event_window = EventWindow(
        source=f"NVML Xid events of {trays} trays",
        start="2026-11-28T02:58:12.00Z",
        length_s=None,
        gpus=[g.index for g in gpus],
    )
    return node


def _sendrecv(src: int, dst: int, value: float | None, error: str | None = None) -> P2PMeasurement:
    return P2PMeasurement(
        src,
        dst,
        "sendrecv",
        value,
        "GB/s",
        bytes_copied=SENDRECV_MIB * MIB * ITERATIONS,
        error=error,
        source="torch.distributed/nccl send/recv",
        conditions={
            "size_mib": str(SENDRECV_MIB),
            "iterations": str(ITERATIONS),
            "warmup": "3",
            "backend": "nccl",
            "method": "send/recv both ways at once, rounds of disjoint pairs",
        },
    )


def scheduled_pairs(trays: int = TRAYS) -> list[tuple[int, int]]:
    """The launcher's send/recv schedule for ranks placed tray by tray (rank r on GPU r)."""
    ranks = [list(range(t * PER_TRAY, (t + 1) * PER_TRAY)) for t in range(trays)]
    return [pair for rounds in pair_schedule(ranks) for pair in rounds]


def _pair_value(a: int, b: int) -> float:
    wobble = (a * 7 + b * 3) % 11
    return 742.0 + 2.5 * wobble


def _all_reduce(busbw: float, world: int = GPUS) -> CollectiveMeasurement:
    size = 4096 * MIB
    algbw = busbw / (2 * (world - 1) / world)
    return CollectiveMeasurement(
        "all_reduce",
        size,
        world,
        round(size / (algbw * 1e3), 1),
        round(algbw, 2),
        busbw,
        correct=True,
        backend="nccl",
        rank_gpus=list(range(world)),
        nvls_available=True,
        source="torch.distributed",
        conditions={"iterations": "20", "warmup": "5", "backend": "nccl", "launcher": "slurm"},
    )


def _ring(world: int = GPUS, off_nvlink: set[int] | None = None) -> list[TransportChannel]:
    """Two ring channels through all ranks; a hop into or out of a tray in ``off_nvlink`` goes over IB."""
    channels = []
    for channel in range(2):
        for rank in range(world):
            peer = (rank + 1) % world
            same_tray = rank // PER_TRAY == peer // PER_TRAY
            trays = {rank // PER_TRAY, peer // PER_TRAY}
            if same_tray:
                transport, detail = "P2P", "P2P/CUMEM/read"
            elif off_nvlink and trays & off_nvlink:
                transport, detail = "NET", f"NET/IB/{channel}/GDRDMA"
            else:
                transport, detail = "P2P", "P2P/MNNVL/read"
            channels.append(TransportChannel(channel, rank, rank % PER_TRAY, peer, peer % PER_TRAY, transport, detail))
    return channels


def _audit(channels: list[TransportChannel]) -> NcclAudit:
    return NcclAudit(
        channels=channels,
        nvls_available=True,
        nvls_channels=16,
        env={"NCCL_MNNVL_ENABLE": "1"},
        source="nccl logs of 72 ranks",
    )


def _record(node: Node) -> Node:
    node.environment = Environment(
        versions={"nccl": "2.26.2", "torch": "2.13.0", "cuda_runtime": "12.8", "kernel": "6.8.0-1021-nvidia-64k"},
        suite="gb200-nvl72",
        suite_file="suites/gb200-nvl72.toml",
        thresholds=[f"thresholds/{name}.toml" for name in ("nvswitch-common", "b200-sxm", "gb200", "gb200-nvl72")],
        saved_utc="2026-11-28T03:14:00Z",
    )
    return node


def healthy_rack() -> Node:
    """A GB200 NVL72 rack as it should be: 18 trays in one clique, every link up, all traffic on NVLink."""
    node = _rack_node()
    pairs = [_sendrecv(a, b, _pair_value(a, b)) for a, b in scheduled_pairs()]
    node.measurements = Measurements(p2p=pairs, collectives=[_all_reduce(839.0)], nccl=_audit(_ring()))
    node.measurements.host_link = host_links(node.gpus)
    return _record(node)


def faulty_rack() -> Node:
    """Tray 5 registered in another clique (so NCCL reaches it over IB) and tray 11 with two links down per GPU."""
    node = healthy_rack()
    for gpu in node.gpus[WRONG_CLIQUE_TRAY * PER_TRAY : (WRONG_CLIQUE_TRAY + 1) * PER_TRAY]:
        assert gpu.fabric is not None
        gpu.fabric.clique_id = OTHER_CLIQUE
    for gpu in node.gpus[LINKS_DOWN_TRAY * PER_TRAY : (LINKS_DOWN_TRAY + 1) * PER_TRAY]:
        assert gpu.nvlinks is not None
        for number in DOWN_LINKS:
            gpu.nvlinks[number] = NvLinkInfo(link=number, active=False)
    for m in node.measurements.p2p:
        trays = {m.src // PER_TRAY, m.dst // PER_TRAY}
        if WRONG_CLIQUE_TRAY in trays and len(trays) == 2:
            m.value = 46.8 + (m.src % 3)  # one NDR InfiniBand port, not NVLink
        elif LINKS_DOWN_TRAY in trays and m.value is not None:
            m.value = round(m.value * (LINKS - len(DOWN_LINKS)) / LINKS, 1)
    node.measurements.collectives = [_all_reduce(318.4)]
    node.measurements.nccl = _audit(_ring(off_nvlink={WRONG_CLIQUE_TRAY}))
    return node


def missing_tray_rack() -> Node:
    """17 trays: one host never joined the job, so the last tray slot is empty (as the launcher numbers)."""
    node = _rack_node(TRAYS - 1)
    world = GPUS - PER_TRAY
    pairs = [_sendrecv(a, b, _pair_value(a, b)) for a, b in scheduled_pairs(TRAYS - 1)]
    node.measurements = Measurements(p2p=pairs, collectives=[_all_reduce(836.2, world)], nccl=_audit(_ring(world)))
    node.measurements.host_link = host_links(node.gpus)
    return _record(node)


def net_between_trays_rack() -> Node:
    """Everything healthy except NCCL's transport: the hops into and out of tray 8 went over InfiniBand."""
    node = healthy_rack()
    node.measurements.nccl = _audit(_ring(off_nvlink={8}))
    return node


SLOW_PAIR = (9, 56)  # tray 2's GPU 1 and tray 14's GPU 0, a pair of the launcher's schedule


def slow_pair_rack() -> Node:
    """One cross-tray send/recv pair far below the floor, everything else healthy."""
    node = copy.deepcopy(healthy_rack())
    (slow,) = [m for m in node.measurements.p2p if (m.src, m.dst) == SLOW_PAIR]
    slow.value = 212.6
    return node
