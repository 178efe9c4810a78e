"""The evidence families: the facts a file can feed, and the checks each family feeds.

Each format (:mod:`pytest_nvlink.sources.evidence.parsers.registry`) names the families its merge
step feeds; the coverage table of a run lists every family here, with the files that fed it.
"""

from __future__ import annotations

__all__ = ["FAMILIES", "FAMILY_CHECKS"]

# Which check functions each evidence family feeds, for the coverage table; in the table's order.
FAMILY_CHECKS: dict[str, str] = {
    "inventory": "test_gpu_count, test_gpu_model, test_driver",
    "paths": "test_path",
    "p2p": "test_p2p_status",
    "nvlinks": "test_nvlink_active_links, test_nvlink_version, test_nvlink_speed",
    "nvlink_errors": "test_nvlink_errors",
    "p2p_bandwidth": "test_p2p_unidirectional, test_p2p_bidirectional, test_p2p_latency, test_p2p_path_proof",
    "host_link": "test_host_link",
    "collectives": "test_collective_busbw",
    "nccl_transport": "test_nccl_transport",
    "platform": "test_fabric, test_pcie_link",
    "xid_events": "test_xid (and test_fabric, for NVSwitch SXid and Fabric Manager lines)",
}

FAMILIES: tuple[str, ...] = tuple(FAMILY_CHECKS)
