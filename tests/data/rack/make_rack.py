"""Write the rack evidence sets under tests/data/rack/ (deterministic: run it again, get the same bytes).

A GB200 NVL72 rack of 18 trays x 4 GPUs, in the formats of real captures: ``nvidia-smi -q`` Fabric
sections and ``nvidia-smi nvlink -s`` per tray (some trays concatenated after ``host: NAME`` lines,
some one file per tray named after its host), nvbandwidth's multinode testcase as its MPI build
prints it (``Process N (host): device M``, devices restarting on every host), a 72-rank
``all_reduce_perf`` and its ``NCCL_DEBUG=INFO`` log with the ``MNNVL 1 cliqueId ...`` decision and
``via P2P/MNNVL`` channels. Sets:

- ``healthy``: every tray in one cluster and clique, NCCL on P2P/MNNVL and NVLS.
- ``wrong-clique``: tray 7 registered in another clique; NCCL leaves it out of the NVLink clique and
  reaches it through the network.
- ``net-ib``: fabric healthy, but NCCL ran with MNNVL off, so traffic between trays went over IB.

``tray_facts(variant)`` gives the same facts as plain records, from which the tests build the rack
snapshot the launcher would have written, to compare with what the evidence loader makes of the files.

    python tests/data/rack/make_rack.py
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAYS = 18
GPUS = 4
CLUSTER = "6f4a4bf1-07a0-79a1-939a-0a887f4bffa6"
CLIQUE = 32766
OTHER_CLIQUE = 32767
WRONG_TRAY = 7
BUS_IDS = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")
NAME = "NVIDIA GB200"
DRIVER = "570.124.06"
LINKS = 18
# NVLink5: 18 links x 50 GB/s = 900 GB/s per direction per GPU, which `nvidia-smi nvlink -s` prints as 53.125 GB/s
# per link on GB200 (NVIDIA/k8s-test-infra#371; NVIDIA Health Validation expected_speed_mbytes_per_sec 53125;
# GoogleCloudPlatform/cluster-toolkit PR #5942 checks 53.125 on A4X GB200), as thresholds/b200-sxm.toml cites.
LINK_GBPS = 53.125
CHANNELS = 16
VARIANTS = ("healthy", "wrong-clique", "net-ib")
HEADER = (
    "# source: constructed for pytest-nvlink tests by tests/data/rack/make_rack.py from the layouts of real captures\n"
    "# machine: a GB200 NVL72 rack, 18 compute trays x 4 GPUs (variant {variant})\n"
    "# note: NOT a capture; deterministic figures\n\n"
)


@dataclass(frozen=True)
class GpuFacts:
    host: str
    local: int
    uuid: str
    bus_id: str
    clique: int


def host(tray: int) -> str:
    return f"nvl72-tray{tray:02d}"


def _uuid(tray: int, local: int) -> str:
    digest = hashlib.sha256(f"gb200-{tray}-{local}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def clique_of(variant: str, tray: int) -> int:
    return OTHER_CLIQUE if variant == "wrong-clique" and tray == WRONG_TRAY else CLIQUE


def tray_facts(variant: str) -> list[list[GpuFacts]]:
    return [
        [GpuFacts(host(t), i, _uuid(t, i), BUS_IDS[i], clique_of(variant, t)) for i in range(GPUS)]
        for t in range(1, TRAYS + 1)
    ]


def _jitter(*keys: object) -> float:
    """A deterministic number in [0, 1) for the keys."""
    return int(hashlib.sha256(repr(keys).encode()).hexdigest()[:8], 16) / 2**32


# --- nvidia-smi ---------------------------------------------------------------------------------


def smi_q(gpus: list[GpuFacts]) -> str:
    lines = [
        "==============NVSMI LOG==============",
        "",
        "Timestamp                                 : Tue Dec  1 10:00:00 2026",
        f"Driver Version                            : {DRIVER}",
        "CUDA Version                              : 12.8",
        "",
        f"Attached GPUs                             : {len(gpus)}",
    ]
    for gpu in gpus:
        lines += [
            f"GPU {gpu.bus_id}",
            f"    Product Name                          : {NAME}",
            "    Product Architecture                  : Blackwell",
            f"    GPU UUID                              : {gpu.uuid}",
            f"    Minor Number                          : {gpu.local}",
            f"    Module ID                             : {gpu.local + 1}",
            "    Fabric",
            "        State                             : Completed",
            "        Status                            : Success",
            f"        CliqueId                          : {gpu.clique}",
            f"        ClusterUUID                       : {CLUSTER}",
            "        Health",
            "            Bandwidth                     : Full",
            "            Route Recovery in progress    : False",
            "            Route Unhealthy               : False",
            "            Access Timeout Recovery       : False",
            "            Incorrect Configuration       : None",
            "            Partition Assigned            : True",
            "            Summary                       : Healthy",
            "    PCI",
            f"        Bus Id                            : {gpu.bus_id}",
            "",
        ]
    return "\n".join(lines) + "\n"


def nvlink_status(gpus: list[GpuFacts]) -> str:
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu.local}: {NAME} (UUID: {gpu.uuid})")
        lines += [f"\t Link {link}: {LINK_GBPS:g} GB/s" for link in range(LINKS)]
    return "\n".join(lines) + "\n"


# --- nvbandwidth ----------------------------------------------------------------------------------


def nvbandwidth(variant: str, trays: list[list[GpuFacts]]) -> str:
    gpus = [gpu for tray in trays for gpu in tray]
    lines = [
        "nvbandwidth Version: v0.7",
        "Built from Git version: v0.7",
        "",
        "MPI version: Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022",
        "CUDA Runtime Version: 12080",
        "CUDA Driver Version: 12080",
        f"Driver Version: {DRIVER}",
        "",
    ]
    lines += [
        f"Process {n} ({g.host}): device {g.local}: {NAME} ({g.bus_id.removesuffix('.0')})" for n, g in enumerate(gpus)
    ]
    lines += ["", "Running multinode_device_to_device_memcpy_read_ce."]
    lines.append("memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)")
    lines.append("    " + "".join(f"{n:>10}" for n in range(len(gpus))))
    total = 0.0
    for row, a in enumerate(gpus):
        cells = []
        for col, b in enumerate(gpus):
            if row == col or a.clique != b.clique:  # no fabric handle import across cliques
                cells.append(f"{'N/A':>10}")
                continue
            value = round(797.6 + 0.7 * _jitter("nvb", row, col), 2)
            total += value
            cells.append(f"{value:>10.2f}")
        lines.append(f"{row:>2}  " + "".join(cells))
    lines += ["", f"SUM multinode_device_to_device_memcpy_read_ce {total:.2f}", ""]
    lines.append("NOTE: The reported results may not reflect the full capabilities of the platform.")
    return "\n".join(lines) + "\n"


# --- nccl-tests and its NCCL log --------------------------------------------------------------------


def _prefix(gpu: GpuFacts, rank: int) -> str:
    pid = 31000 + rank
    return f"{gpu.host}:{pid}:{pid + 100} [{gpu.local}]"


def nccl_tests(variant: str, trays: list[list[GpuFacts]]) -> str:
    gpus = [gpu for tray in trays for gpu in tray]
    ranks = len(gpus)
    lines = [
        "# nccl-tests version 2.14.1 nccl-headers=22602 nccl-library=22602",
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for rank, gpu in enumerate(gpus):
        bus = gpu.bus_id.removesuffix(".0")[4:]
        pid = 31000 + rank
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {gpu.host} device  {gpu.local} [{bus}] {NAME}")
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10,
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
        " #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
        "       ",
    ]
    peak = 850.0 if variant == "healthy" else 180.0
    factor = 2 * (ranks - 1) / ranks
    size = 1 << 20
    busbws = []
    while size <= 16 << 30:
        cells = []
        for place in ("out", "in"):
            busbw = round(peak * size / (size + (50 << 20)) * (1 - 0.004 * _jitter(variant, size, place)), 2)
            algbw = busbw / factor
            time_us = size / (algbw * 1e3)
            cells.append(f"{time_us:8.1f} {algbw:7.2f} {busbw:7.2f} {0:6d}")
            busbws.append(busbw)
        lines.append(f"{size:12d} {size // 4:13d} {'float':>9} {'sum':>7} {-1:7d} " + " ".join(cells))
        size *= 2
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.3f}",
        "#",
        "",
    ]
    return "\n".join(lines) + "\n"


def nccl_log(variant: str, trays: list[list[GpuFacts]]) -> str:
    gpus = [gpu for tray in trays for gpu in tray]
    ranks = len(gpus)
    mnnvl = variant != "net-ib"
    lines = []
    members = {c: [r for r, g in enumerate(gpus) if g.clique == c] for c in {g.clique for g in gpus}}
    for rank, gpu in enumerate(gpus):
        p = _prefix(gpu, rank)
        bus = _nccl_bus(gpu.bus_id)
        lines += [
            f"{p} NCCL INFO ncclCommInitRank comm 0x5600{rank:04x} rank {rank} nranks {ranks} cudaDev {gpu.local} "
            f"nvmlDev {gpu.local} busId {bus} commId 0x6b1e5a77c0de1234 - Init START",
            f"{p} NCCL INFO NCCL_MNNVL_ENABLE set by environment to {1 if mnnvl else 0}.",
        ]
        clique = members[gpu.clique]
        if mnnvl:
            lines.append(
                f"{p} NCCL INFO MNNVL busId 0x{bus} fabric UUID 6f4a4bf107a079a1.939a0a887f4bffa6 cliqueId "
                f"0x{gpu.clique:x} state 3 healthMask 0xaa"
            )
            lines.append(
                f"{p} NCCL INFO MNNVL 1 cliqueId {gpu.clique:x} cliqueSize {len(clique)} cliqueRank "
                f"{clique.index(rank)} nvlDomainSize {len(clique)}"
            )
        local_ranks = len(clique) if mnnvl else GPUS
        nodes = len(members) if mnnvl else TRAYS
        lines.append(
            f"{p} NCCL INFO comm 0x5600{rank:04x} rank {rank} nRanks {ranks} nNodes {nodes} localRanks {local_ranks} "
            f"localRank {clique.index(rank) if mnnvl else gpu.local} MNNVL {1 if mnnvl else 0}"
        )
        nvls = variant == "healthy"
        lines.append(f"{p} NCCL INFO NVLS multicast support is {'' if nvls else 'not '}available on dev {gpu.local}")
        lines.append(
            f"{p} NCCL INFO {CHANNELS} coll channels, {CHANNELS} collnet channels, {16 if nvls else 0} nvls channels, "
            "32 p2p channels, 32 p2p channels per peer"
        )
    for channel in range(CHANNELS):
        for rank, gpu in enumerate(gpus):
            peer = (rank + 1) % ranks
            lines.append(f"{_prefix(gpu, rank)} NCCL INFO Channel {channel:02d}/0 : {_link(variant, gpus, rank, peer)}")
    for rank, gpu in enumerate(gpus):
        lines.append(
            f"{_prefix(gpu, rank)} NCCL INFO ncclCommInitRank comm 0x5600{rank:04x} rank {rank} nranks {ranks} "
            f"cudaDev {gpu.local} nvmlDev {gpu.local} busId {_nccl_bus(gpu.bus_id)} commId 0x6b1e5a77c0de1234 - "
            "Init COMPLETE"
        )
    return "\n".join(lines) + "\n"


def _nccl_bus(bus_id: str) -> str:
    """NCCL's int64 bus id as it prints it: domain << 20 | bus << 12 | device << 4, in hex."""
    domain, bus, device = (int(part, 16) for part in bus_id.removesuffix(".0").split(":"))
    return f"{domain << 20 | bus << 12 | device << 4:x}"


def _link(variant: str, gpus: list[GpuFacts], rank: int, peer: int) -> str:
    a, b = gpus[rank], gpus[peer]
    ends = f"{rank}[{a.local}] -> {peer}[{b.local}]"
    if a.host == b.host:
        return f"{ends} via P2P/MNNVL" if variant != "net-ib" else f"{ends} via P2P/CUMEM/read"
    if variant == "net-ib" or a.clique != b.clique:
        return f"{ends} [send] via NET/IB/{a.local}/GDRDMA"
    return f"{ends} via P2P/MNNVL"


# --- the sets ---------------------------------------------------------------------------------------


def write_set(variant: str) -> None:
    out = HERE / variant
    trays = tray_facts(variant)
    header = HEADER.format(variant=variant)
    files: dict[Path, str] = {}
    # Trays 1-9: one file for all, each tray's output after a "host: NAME" line; trays 10-18: a file each.
    files[out / "nvidia-smi-q-trays01-09.txt"] = header + "".join(
        f"host: {tray[0].host}\n{smi_q(tray)}" for tray in trays[:9]
    )
    for tray in trays[9:]:
        files[out / "nvidia-smi-q" / f"{tray[0].host}.txt"] = header + smi_q(tray)
    files[out / "nvlink-status.txt"] = header + "".join(f"host: {t[0].host}\n{nvlink_status(t)}" for t in trays)
    files[out / "nvbandwidth-multinode.txt"] = header + nvbandwidth(variant, trays)
    files[out / "all_reduce_perf.txt"] = header + nccl_tests(variant, trays)
    files[out / "nccl-debug.txt"] = header + nccl_log(variant, trays)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def main() -> None:
    for variant in VARIANTS:
        write_set(variant)


if __name__ == "__main__":
    main()
