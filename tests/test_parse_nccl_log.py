"""NCCL_DEBUG=INFO log parsing and its mapping to the model's NcclAudit."""

from __future__ import annotations

import pytest
from conftest import sample

from pytest_nvlink.model import NcclAudit
from pytest_nvlink.sources.evidence.parsers import nccl_log
from pytest_nvlink.sources.evidence.parsers.common import ParseError

SAMPLE = "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt"


def test_h20_two_ranks_all_p2p_cumem() -> None:
    log = nccl_log.parse(sample(SAMPLE))
    assert len(log.channels) == 48
    assert {c.transport for c in log.channels} == {"P2P"}
    assert {c.detail for c in log.channels} == {"P2P/CUMEM"}
    assert {(c.src_rank, c.src_dev, c.dst_rank, c.dst_dev) for c in log.channels} == {(1, 2, 0, 0), (0, 0, 1, 2)}
    assert sorted({c.channel for c in log.channels}) == list(range(24))
    assert (log.nnodes, log.local_ranks, log.nranks) == (1, 2, 2)
    assert log.channel_counts == {"coll": 24, "collnet": 24, "nvls": 0, "p2p": 32}
    assert log.nvls_channels == 0
    assert log.nvls_available is None
    assert log.env == {"NCCL_HOSTID": "10.10.10.10"}
    assert log.ranks[1].nvml_dev == 2 and log.ranks[1].bus_id == "a2000"
    assert log.warnings == () and log.last_warn is None
    assert set(log.hosts) == {"nccl-tests-gdr-2-worker-0", "nccl-tests-gdr-2-worker-1"}


def test_to_audit() -> None:
    audit = nccl_log.to_audit(nccl_log.parse(sample(SAMPLE)), "log.txt")
    assert isinstance(audit, NcclAudit)
    assert len(audit.channels) == 48 and audit.channels[0].transport == "P2P"
    assert audit.nvls_channels == 0 and audit.source == "log.txt"
    assert audit.env == {"NCCL_HOSTID": "10.10.10.10"}


MIXED = """\
host-a:100:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
host-a:100:200 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.
host-a:100:200 [0] NCCL INFO NCCL_SHM_DISABLE set by environment to 0
host-a:100:200 [0] NCCL INFO NVLS multicast support is not available on dev 0
host-a:100:200 [1] NCCL INFO NVLS multicast support is available on dev 1
host-a:100:200 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
host-a:100:200 [0] NCCL INFO 16 coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels
host-a:100:201 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
host-a:100:201 [0] NCCL INFO Channel 01 : 0[0] -> 1[1] via SHM/direct
host-a:100:201 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
host-a:100:201 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA
host-a:100:201 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/IPC/read
host-a:100:201 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/direct pointer
host-a:100:201 [0] NCCL INFO Channel 04/0 : 0[0] -> 2[2] via P2P/indirect/1[1]
host-a:100:200 [0] NCCL INFO Could not enable P2P between dev 0(=1b000) and dev 1(=1c000)
host-a:100:200 [0] graph/paths.cc:123 NCCL WARN P2P is disabled between NVLINK connected GPUs 0 and 1.
host-a:100:200 [0] transport.cc:9 NCCL WARN the last warning
application output that is not NCCL
"""


def test_shm_net_and_p2p_variants() -> None:
    log = nccl_log.parse(MIXED.replace("\n", "\r\n"))
    assert log.version == "2.21.5+cuda12.4"
    assert [c.transport for c in log.channels] == ["SHM", "SHM", "NET", "NET", "P2P", "P2P", "P2P"]
    assert log.channels[2].direction == "send" and log.channels[2].detail == "NET/IB/0/GDRDMA"
    assert log.channels[5].detail == "P2P/direct pointer"
    assert log.channels[6].detail == "P2P/indirect/1[1]"
    assert log.env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0"}
    assert log.nvls_available is False
    assert log.nvls_channels == 16
    assert (log.nnodes, log.local_ranks, log.nranks) == (2, 8, 16)
    assert len(log.p2p_problems) == 2
    assert log.last_warn == "the last warning"
    audit = nccl_log.to_audit(log, None)
    assert audit.p2p_disabled_warnings[0].startswith("Could not enable P2P")
    assert audit.last_warn == "the last warning"
    assert audit.nvls_available is False


def test_parse_many_merges_rank_logs() -> None:
    rank0 = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    rank1 = "h:3:4 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
    rank1 += "h:3:4 [1] NCCL INFO NVLS multicast support is available on dev 1\n"
    merged = nccl_log.parse_many([rank0, rank1, rank0])
    assert [(c.src_rank, c.dst_rank) for c in merged.channels] == [(0, 1), (1, 0)]  # duplicates collapse
    assert merged.nvls_available is True


def test_parse_many_names_the_bad_log() -> None:
    good = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    with pytest.raises(ParseError, match="log 2: expected NCCL_DEBUG log lines"):
        nccl_log.parse_many([good, "no nccl here\n"])
    with pytest.raises(ParseError, match="no NCCL logs"):
        nccl_log.parse_many([])


def test_damaged_channel_line_names_the_line() -> None:
    text = "h:1:2 [0] NCCL INFO NCCL version 2.21.5\nh:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1 via P2P/CUMEM\n"
    with pytest.raises(ParseError, match="Channel NN/N") as info:
        nccl_log.parse(text)
    assert info.value.line_no == 2


def test_conflicting_versions_are_an_error() -> None:
    text = "h:1:2 [0] NCCL INFO NCCL version 2.21.5\nh:1:2 [0] NCCL INFO NCCL version 2.19.3\n"
    with pytest.raises(ParseError, match="one NCCL version"):
        nccl_log.parse(text)


def test_text_without_nccl_lines_is_an_error() -> None:
    with pytest.raises(ParseError, match="NCCL_DEBUG"):
        nccl_log.parse("hello\n")
