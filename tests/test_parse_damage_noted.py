"""Damage is never silent (issue 28, item 3): deleting or garbling any one judged line of a realistic input of each
evidence format changes what the load hands on (the node's facts, or a note, unknown reason or usage error that
names the damage). Lines a parser may ignore are listed per input with why, and the same edits must then change
nothing, so the allow-list cannot grow to hide a judged line.

Small inputs are edited at every line with every edit; large ones at lines Hypothesis draws (derandomized under the
"ci" profile, tests/conftest.py). The edits and the fingerprint are in damage_cases.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from conftest import EVIDENCE, REPO, examples, sample
from damage_cases import ALL, Case, Irrelevant, allowed, damaged, edits, fingerprint, with_damage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_nvlink.sources.evidence.parsers import detect
from pytest_nvlink.sources.evidence.parsers.registry import formats

EXHAUSTIVE_UP_TO = 200  # lines; larger inputs are edited at drawn lines


def span(first: int, last: int) -> tuple[int, ...]:
    """File lines ``first`` to ``last``, both included."""
    return tuple(range(first, last + 1))


TEXT_EDITS = frozenset({"truncate", "swap"})
NOT_DELETE = frozenset({"truncate", "digit", "swap"})
# topo -m and topo -p2p: the Legend nvidia-smi prints under the matrix; the parser reads the cells, not the words.
LEGEND = (
    Irrelevant("the Legend title: the cells are read, not their legend", r"^\s*Legend:\s*$"),
    Irrelevant("a Legend entry: the cells are read, not their legend", r"^\s*(?:X|SYS|NODE|PHB|PXB|PIX|NV#)\s+= "),
    Irrelevant("NIC Legend: NICs are not judged", r"^\s*NIC Legend:|^\s*NIC\d+: mlx"),
    Irrelevant("a NIC row: only GPU pairs are judged", r"^NIC\d\s", frozenset({"delete", "digit", "swap"})),
    Irrelevant(
        "the header's last digit names a NIC column; NIC columns are not read", r"^\s+GPU0\s+GPU1", frozenset({"digit"})
    ),
    Irrelevant(
        "a GPU row's last field is its CPU/NUMA affinity or GPU NUMA ID, which is not read",
        r"^GPU\d\s",
        frozenset({"truncate"}),
    ),
)
P2P_STATUS_LEGEND = Irrelevant(
    "a topo -p2p Legend line: the cells are read, not their legend", r"^\s*(?:Legend:|(?:X|OK|CNS|GNS|TNS|NS|U)\s+= )"
)
P2P_BANNER = (
    Irrelevant("the test's banner: detection reads the matrix titles too", r"^\[P2P \(Peer-to-Peer\)"),
    Irrelevant("the samples' NOTE text", r"NOTE: |So you can see lesser Bandwidth"),
    Irrelevant(
        "a device line's last digit is its pciDomainID, which is not read", r"^Device: \d", frozenset({"digit"})
    ),
    Irrelevant(
        "the unit of a matrix title is not read", r"P2P=Enabled .*Matrix \((?:GB/s|us)\)", frozenset({"truncate"})
    ),
)
NCCL_TESTS_BANNER = (
    Irrelevant("a bare '#' line of nccl-tests' banner", r"^#\s*$"),
    Irrelevant("the '# Using devices' title: the rank lines under it are read", r"^# Using devices"),
    Irrelevant(
        "nThread/nGpus are read only when the device list is cut short; this one lists every rank",
        r"^# nThread \d+ nGpus",
    ),
    Irrelevant("the column header: rows are read by position", r"^#\s+(?:out-of-place|size\s+count|\(B\))"),
    Irrelevant("the average busbw over all sizes is not judged; each size's busbw is", r"^# Avg bus bandwidth"),
    Irrelevant(
        "the footer's count of wrong values when gone or cut: the rows' #wrong columns are judged",
        r"^# Out of bounds values",
        frozenset({"delete", "truncate"}),
    ),
)
KERNEL_TEXT = Irrelevant(
    "the words after a non-Xid line's stamp: only its stamp (the window) is read",
    r"^(?:\[\s*[\d.]+\]|\w{3} \d\d [\d:]{8} \S+) (?!.*(?:\bS?Xid\b|fabricmanager))",
    TEXT_EDITS,
)
NVBANDWIDTH_PREAMBLE = (
    Irrelevant("versions are not read from nvbandwidth (nvidia-smi outputs give them)", r"[Vv]ersion: "),
    Irrelevant(
        "a device line's last digit is in its bus id, which is not read from nvbandwidth",
        r"^Device \d+: ",
        frozenset({"digit"}),
    ),
)
SMI_NOT_READ = (
    Irrelevant(
        "sections and fields nvidia-smi -q prints that the plugin does not read",
        r"^\s*(?:Product Brand|Product Architecture|Persistence Mode|Addressing Mode|Serial Number|Minor Number|"
        r"VBIOS Version|Module ID|Clocks|Max Clocks|Graphics|PCI|Bus|Device|Domain|Device Id|Sub System Id|"
        r"GPU Link Info|Host Max|Device Current)\s*(?::|$)",
    ),
    Irrelevant("'Bus Id' repeats the 'GPU 00000000:...' line that opens the block, which is read", r"^\s+Bus Id\s+:"),
    Irrelevant(
        "the MIG Mode title's colon cut: 'MIG Mode' without it is the form other drivers print, read alike",
        r"^\s+MIG Mode\s*:\s*$",
        frozenset({"truncate"}),
    ),
    Irrelevant(
        "the log's banner, stamp and CUDA version, not read", r"^(?:=+NVSMI LOG=+|Timestamp|CUDA Version)(?:\s|$)"
    ),
)

NVLINK5_NOT_ERRORS = (
    r"Link \d+: (?:(?:Tx|Rx) (?:packets|bytes)|(?:Effective|Symbol) BER|Link recovery successful events):"
)

CASES: tuple[Case, ...] = (
    Case(
        "bandwidth_test",
        "bandwidthTest/a100-sxm4-40gb-quick-pinned-router-gao.txt",
        (
            Irrelevant(
                "the banner and the closing note gone: the blocks alone identify the tool",
                r"^\s*(?:\[CUDA Bandwidth Test\]|Running on\.\.\.|NOTE: The CUDA Samples)",
                frozenset({"delete"}),
            ),
            Irrelevant(
                "the closing NOTE, edited", r"^NOTE: The CUDA Samples", frozenset({"truncate", "swap", "digit"})
            ),
            # The Device to Device block is noted as present and its figure is not read (no host-link figure);
            # edits that leave it recognisable as that block change nothing.
            Irrelevant("the D2D block's heading, a digit changed", lines=(21,), ops=frozenset({"digit"})),
            Irrelevant("the D2D block's memory line gone", lines=(22,), ops=frozenset({"delete"})),
            Irrelevant("the D2D block's figure, edited", lines=(24,), ops=frozenset({"truncate", "digit"})),
        ),
    ),
    Case(
        "dcgm_diag",
        "dcgmi-diag/constructed-h100-8gpu-dcgm335-r2-verbose-gpu5-slow.txt",
        (
            Irrelevant(
                "the command, the table's frame, its metadata and deployment rows and other plugins' rows: no "
                "host-link figure is stated there",
                lines=(5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 49, 50, 51),
            ),
            Irrelevant(
                "the end of a low-bandwidth warning (DCGM's floor, which is not ours): its figure is read from the "
                "warning's first lines",
                lines=(22, 25),
            ),
        ),
    ),
    Case("topo", "topo/a100-sxm4-80gb-8gpu-distserve3.txt", LEGEND),
    Case(
        "topo",
        "topo/l40s-4gpu-pcie-only-node-sys.txt",
        (
            *(r for r in LEGEND if "Legend entry" not in r.why),
            Irrelevant("a Legend entry: the cells are read", r"^\s*(?:X|SYS|NODE|PHB|PXB|PIX)\s+= "),
            # Its NV# entry is read: a PCIe-only matrix with the whole Legend shows that NV# cells could be printed.
            Irrelevant("the NV# entry's words", r"^\s*NV#\s+= ", TEXT_EDITS),
        ),
    ),
    Case("topo_p2p", "topo/constructed-h100-8gpu-topo-p2p-nvlink.txt", (P2P_STATUS_LEGEND,)),
    Case("nvlink", "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt", ()),
    Case(
        "nvlink",
        "nvlink/a100-sxm4-80gb-8gpu-constructed-status-cut-short.txt",
        (
            Irrelevant(
                "GPU 2's one link before the elision: the GPU's links are unknown either way",
                lines=(32,),
                ops=frozenset({"delete", "digit"}),
            ),
            Irrelevant(
                "a link speed of GPU 6, whose block the paste cuts: its links are unknown either way",
                lines=span(48, 50),
                ops=frozenset({"digit"}),
            ),
        ),
    ),
    Case(
        "nvlink",
        "nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt",
        (
            Irrelevant(
                "the '=== GPU n NVLink Errors ===' banner: the 'GPU n: NAME (UUID)' line under it is read", r"^=== GPU"
            ),
        ),
    ),
    Case(
        "nvlink",
        "nvlink/constructed-b200-8gpu-nvlink5-errors-recovery-failed.txt",
        (
            Irrelevant(
                "a traffic counter, BER or successful recovery count: not an error count, not judged",
                NVLINK5_NOT_ERRORS,
                frozenset({"digit"}),
            ),
            Irrelevant(
                "a traffic counter or BER cut short: not an error count, not judged",
                r"Link \d+: (?:(?:Tx|Rx) (?:packets|bytes)|(?:Effective|Symbol) BER):",
                frozenset({"truncate"}),
            ),
            Irrelevant(
                "Tx discards: not one of the NVLink5 error counters DCGM's health watch judges (MonitorNVLink5Fields)",
                r"Link \d+: Tx discards:",
                frozenset({"digit"}),
            ),
        ),
    ),
    Case(
        "smi_query",
        "nvidia-smi-q/constructed-gb200-fabric-block-only.txt",
        (
            # With no GPU block around it the fabric block's Bandwidth and Summary are not read either.
            Irrelevant(
                "KNOWN GAP: Bandwidth and Summary of a fabric block without its GPU block are not read (smi_query.py)",
                r"^\s+(?:Bandwidth|Summary)\s+:",
                frozenset({"delete", "swap"}),
            ),
            Irrelevant(
                "the fabric Status line when the State line says Completed",
                r"^\s+Status\s+: Success",
                frozenset({"delete"}),
            ),
            Irrelevant("the Health title, its last letters changed", r"^\s+Health\s*$", frozenset({"digit", "swap"})),
            Irrelevant(
                "the clique of a GPU whose fabric State is read alone here", r"^\s+(?:CliqueId|ClusterUUID)\s+:"
            ),
        ),
    ),
    Case(
        "smi_query",
        "nvidia-smi-q/h100-sxm-8gpu-constructed-q.txt",
        SMI_NOT_READ,
    ),
    Case(
        "nvbandwidth",
        "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt",
        (
            Irrelevant(
                "the last cell of the last row is the diagonal (a GPU to itself)",
                lines=(15,),
                ops=frozenset({"truncate", "digit"}),
            ),
        ),
    ),
    Case(
        "nvbandwidth",
        "nvbandwidth/constructed-h100-8gpu-aborted-data-check.txt",
        (
            *NVBANDWIDTH_PREAMBLE,
            Irrelevant(
                "the 'Running' line of a testcase its SUM line names too",
                lines=(21,),
                ops=frozenset({"delete", "swap"}),
            ),
            Irrelevant(
                "the SUM line gone (older nvbandwidth versions print none), or its last digit changed (within the "
                "rounding of its cells' two decimals; a larger change is noted)",
                r"^SUM ",
                frozenset({"delete", "digit"}),
            ),
            Irrelevant(
                "the lines after 'Invalid value when checking the pattern', which alone marks the abort",
                r"^(?:Current pattern value|ASSERT in|Aborted \(core dumped\))",
            ),
        ),
    ),
    Case(
        "p2p_latency",
        "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt",
        (
            *P2P_BANNER,
            Irrelevant(
                "the connectivity matrix is read for its size only; Access Peer lines are judged",
                lines=(75,),
                ops=frozenset({"delete", "swap"}),
            ),
            Irrelevant("a connectivity cell: read for the size only", lines=span(76, 83), ops=frozenset({"digit"})),
            Irrelevant(
                "the title of a P2P=Disabled matrix, which is not judged", lines=(84,), ops=NOT_DELETE | {"delete"}
            ),
            Irrelevant(
                "the title of the P2P=Disabled latency matrix, which is not judged",
                lines=(104, 124),
                ops=frozenset({"truncate"}),
            ),
            Irrelevant(
                "the header of a matrix that is not judged",
                lines=(85, 105, 125, 135, 155),
                ops=frozenset({"delete", "swap"}),
            ),
            Irrelevant(
                "a row of a P2P=Disabled or CPU latency matrix, which are not judged",
                lines=span(86, 93) + span(106, 113) + span(126, 133) + span(136, 143) + span(156, 163),
                ops=NOT_DELETE,
            ),
            Irrelevant(
                "the last cell of a judged matrix's last row is the diagonal",
                lines=(103, 123, 153),
                ops=frozenset({"truncate", "digit"}),
            ),
        ),
    ),
    Case(
        "p2p_latency",
        "p2pBandwidthLatencyTest/constructed-rtx3090-2gpu-pcie-p2p-through-host-bridge.txt",
        (
            *P2P_BANNER,
            Irrelevant(
                "the connectivity matrix is read for its size only; Access Peer lines are judged",
                lines=(15,),
                ops=frozenset({"delete", "swap"}),
            ),
            Irrelevant("a connectivity cell: read for the size only", lines=(16, 17), ops=frozenset({"digit"})),
            Irrelevant(
                "the title of a P2P=Disabled matrix, which is not judged", lines=(18,), ops=NOT_DELETE | {"delete"}
            ),
            Irrelevant(
                "the title of a P2P=Disabled matrix, which is not judged", lines=(26, 34), ops=frozenset({"truncate"})
            ),
            Irrelevant(
                "the header of a matrix that is not judged",
                lines=(19, 27, 35, 39, 47),
                ops=frozenset({"delete", "swap"}),
            ),
            Irrelevant(
                "a row of a P2P=Disabled or CPU latency matrix, which are not judged",
                lines=(20, 21, 28, 29, 36, 37, 40, 41, 48, 49),
                ops=NOT_DELETE,
            ),
            Irrelevant(
                "the last cell of a judged matrix's last row is the diagonal",
                lines=(25, 33, 45),
                ops=frozenset({"truncate", "digit"}),
            ),
        ),
    ),
    Case("nccl_tests", "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt", NCCL_TESTS_BANNER),
    Case(
        "nccl_tests",
        "nccl-tests/constructed-h100-2node-4rank-allreduce-nccl-debug.txt",
        (
            *NCCL_TESTS_BANNER,
            Irrelevant("the command line's options: the binary is read from it", r"^\$ NCCL_DEBUG", NOT_DELETE),
            Irrelevant(
                "a multi-node run's device names are not read (they name no GPU of one node)",
                r"^#  Rank  \d",
                NOT_DELETE,
            ),
            Irrelevant(
                "an NCCL INFO init line among agreeing ones: the device list states the ranks and hosts",
                r"NCCL INFO (?:ncclCommInitRank|comm 0x)",
            ),
        ),
    ),
    Case(
        "nccl_log",
        "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt",
        (
            Irrelevant(
                "an init line: only 'Channel ... via' lines, NCCL_HOSTID and nNodes are judged",
                lines=(*span(5, 7), *span(9, 59), *span(64, 66)),
            ),
            Irrelevant(
                "NCCL_HOSTID line gone or swapped: the other rank's says the same",
                lines=(8,),
                ops=frozenset({"delete", "swap"}),
            ),
            Irrelevant("nccl-tests' column header inside the log", r"^#"),
        ),
    ),
    Case(
        "nccl_log",
        "nccl-debug/h100-sxm-8gpu-constructed-nccl224-prefix-stripped.txt",
        (
            Irrelevant(
                "an NCCL init line the log parser does not read (version, MNNVL fabric, ring setup)",
                r"NCCL INFO (?:NCCL version|MNNVL busId|Connected all rings)",
            ),
            Irrelevant(
                "an init line among eight agreeing ones: the rank count and nNodes stand without it",
                r"NCCL INFO (?:ncclCommInitRank|comm 0x)",
            ),
            Irrelevant("the channel counts' words", r"NCCL INFO \d+ coll channels", NOT_DELETE),
        ),
    ),
    Case(
        "kernel_log",
        "kernel-log/dmesg-constructed-xid74-gpu2.txt",
        (
            Irrelevant("the command line", r"^\$ sudo dmesg"),
            KERNEL_TEXT,
            Irrelevant("a line between the window's first and last, with no Xid", lines=span(7, 13)),
            Irrelevant("the last line's digits after its stamp", lines=(15,), ops=frozenset({"digit"})),
        ),
    ),
    Case(
        "kernel_log",
        "kernel-log/journal-constructed-sxid-fabricmanager.txt",
        (
            Irrelevant("journalctl's span header: the window is read from the entries' stamps", r"^-- Logs begin at"),
            KERNEL_TEXT,
            Irrelevant("a Fabric Manager line that reports no error", r"nv-fabricmanager\[\d+\]: Successfully"),
            Irrelevant("digits in the words after a kernel line's stamp", lines=(6, 10), ops=frozenset({"digit"})),
        ),
    ),
    Case(
        "snapshot_json",
        "snapshots/h100-8gpu-vm-pcie.json",
        (
            Irrelevant(
                "the plugin version and time that wrote the snapshot are not facts of the node",
                r'^ "(?:plugin_version|created_utc)": ',
            ),
            Irrelevant(
                "a key whose value is null reads as absent: without it the file says the same",
                r'^\s*"\w+": null,$',
                frozenset({"delete"}),
            ),
            Irrelevant(
                "a host-link figure's unit, which reads as GB/s (its only unit) when absent",
                r'^\s*"unit": "GB/s",$',
                frozenset({"delete"}),
            ),
            Irrelevant(
                "a list or table of the node whose absence reads as the same empty default",
                r'^\s*"(?:provenance|unknown_reasons|evidence_notes|probe_errors|host_link)": (?:\{\}|\[\]),?$',
                frozenset({"delete"}),
            ),
        ),
        first_line=1,
    ),
)


def text_of(case: Case) -> str:
    if case.text is not None:
        return case.text()
    if case.sample.startswith("snapshots/"):
        return (REPO / case.sample).read_text(encoding="utf-8")
    return sample(case.sample)


def _problem(case: Case, lines: list[str], index: int, op: str, base: str, folder: Path) -> str | None:
    after = fingerprint(with_damage(lines, index, op), folder)
    rule = allowed(case, index, lines[index], op)
    where = f"{op} of line {case.first_line + index} {lines[index][:100]!r}"
    if rule is None and after == base:
        return f"silent: {where}"
    if rule is not None and after != base:
        return f"allow-listed ({rule.why}) but changes the output: {where}"
    return None


_BASES: dict[str, str] = {}  # the undamaged input's fingerprint per case, for the drawn edits
SMALL = [case for case in CASES if len(text_of(case).split("\n")) <= EXHAUSTIVE_UP_TO]
LARGE = [case for case in CASES if case not in SMALL]


@pytest.mark.parametrize("case", SMALL, ids=[case.id for case in SMALL])
def test_every_edit_of_every_line_is_seen_or_allow_listed(case: Case) -> None:
    text = text_of(case)
    lines = text.split("\n")
    with tempfile.TemporaryDirectory() as folder:
        base = fingerprint(text, Path(folder))
        assert not base.startswith("refused"), base
        problems = [_problem(case, lines, index, op, base, Path(folder)) for index, op in edits(lines)]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)


@pytest.mark.parametrize("case", LARGE, ids=[case.id for case in LARGE])
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_edit_of_a_drawn_line_is_seen_or_allow_listed(case: Case, data: st.DataObject) -> None:
    text = text_of(case)
    lines = text.split("\n")
    index = data.draw(st.integers(0, len(lines) - 1), label="line index")
    op = data.draw(
        st.sampled_from([op for op in sorted(ALL) if damaged(lines[index], op) != lines[index]] or ["delete"])
    )
    with tempfile.TemporaryDirectory() as folder:
        base = _BASES.get(case.id) or _BASES.setdefault(case.id, fingerprint(text, Path(folder)))
        assert not base.startswith("refused"), base
        assert _problem(case, lines, index, op, base, Path(folder)) is None


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_allow_list_entry_matches_a_line_and_the_input_is_its_format(case: Case) -> None:
    lines = text_of(case).split("\n")
    unused = [
        rule.why
        for rule in case.irrelevant
        if not any(rule.matches(case.first_line + index, line) for index, line in enumerate(lines))
    ]
    assert not unused, f"allow-list entries that match no line: {unused}"
    assert detect.detect_kind(text_of(case)) in next(f.kinds for f in formats() if f.name == case.format)


def test_every_registered_format_has_a_case() -> None:
    assert {fmt.name for fmt in formats()} <= {case.format for case in CASES}


def test_the_samples_exist() -> None:
    assert all((EVIDENCE / c.sample).is_file() or (REPO / c.sample).is_file() for c in CASES)
