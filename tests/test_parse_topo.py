"""nvidia-smi topo -m / -mp / -p2p parsing: real samples and the damage real captures carry."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.load import load_evidence
from pytest_nvlink.sources.evidence.parsers import topo, topo_p2p
from pytest_nvlink.sources.evidence.parsers.common import ParseError

A100 = "topo/a100-sxm4-80gb-8gpu-distserve3.txt"
H100_PARTIAL = "topo/h100-sxm-8gpu-baremetal-supermicro-nccl1264-partial.txt"
L40S = "topo/l40s-4gpu-pcie-only-node-sys.txt"
HPE = "topo/h100-pcie-nvlink-bridge-pair-hpe-dl380a.txt"


def matrix(rows: list[list[str]], sep: str = "\t", extra: str = "") -> str:
    """A topo -m text for a GPU-only matrix given as row cells."""
    header = sep + sep.join(f"GPU{i}" for i in range(len(rows))) + extra
    body = [sep.join([f"GPU{i}", *cells]) for i, cells in enumerate(rows)]
    return "\n".join([header, *body]) + "\n"


def all_pairs(n: int, cell: str) -> list[list[str]]:
    return [[" X " if i == j else cell for j in range(n)] for i in range(n)]


def test_a100_all_nv12_with_nics_and_legends() -> None:
    result = topo.parse(sample(A100))
    assert result.gpu_count == 8
    assert len(result.paths) == 28
    assert set(result.paths.values()) == {"NV12"}
    assert result.nic_columns == ("NIC0", "NIC1", "NIC2", "NIC3")
    assert result.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert result.nic_paths[(0, "NIC0")] == "SYS"
    assert result.cpu_affinity[0] == "0-63,128-191"
    assert result.cpu_affinity[7] == "64-127,192-254"
    assert result.numa_affinity == {i: ("0" if i < 4 else "1") for i in range(8)}
    assert result.gpu_numa_id == dict.fromkeys(range(8))
    assert result.has_legend
    assert not result.pcie_only


def test_l40s_node_sys_without_nvlink() -> None:
    result = topo.parse(sample(L40S))
    assert result.gpu_count == 4
    assert result.paths == {
        (0, 1): "NODE",
        (0, 2): "SYS",
        (0, 3): "SYS",
        (1, 2): "SYS",
        (1, 3): "SYS",
        (2, 3): "NODE",
    }
    assert not any(p.startswith("NV") for p in result.paths.values())
    assert result.nic_paths[(2, "NIC1")] == "NODE"
    assert not result.pcie_only  # the legend lists NV#, so this is topo -m on a PCIe-only box


def test_hpe_pair_indented_markdown() -> None:
    result = topo.parse(sample(HPE))
    assert result.gpu_count == 2
    assert result.paths == {(0, 1): "NV12"}
    assert result.nic_columns == ()
    assert result.cpu_affinity == {0: "32-63,96-127", 1: "32-63,96-127"}


def test_h100_tab_separated_partial_with_ten_nics() -> None:
    result = topo.parse(sample(H100_PARTIAL))
    assert result.gpu_count == 8
    assert set(result.paths.values()) == {"NV18"}
    assert result.nic_columns == tuple(f"NIC{i}" for i in range(10))
    assert len(result.nic_paths) == 80
    own_nic = {0: "NIC0", 1: "NIC1", 2: "NIC2", 3: "NIC5", 4: "NIC6", 5: "NIC7", 6: "NIC8", 7: "NIC9"}
    for gpu, nic in own_nic.items():
        assert result.nic_paths[(gpu, nic)] == "PIX"
    assert result.cpu_affinity[4] == "56-111,168-223"
    assert result.numa_affinity[4] == "1"
    assert result.gpu_numa_id[4] is None
    assert not result.has_legend


@pytest.mark.parametrize("relative", [A100, L40S, HPE, H100_PARTIAL])
def test_crlf_trailing_tabs_and_indentation_do_not_change_the_result(relative: str) -> None:
    text = sample(relative)
    expected = topo.parse(text)
    crlf = text.replace("\n", "\r\n")
    trailing = "\n".join(line + "\t\t" if line.strip() else line for line in text.split("\n"))
    indented = "\n".join("    " + line for line in text.split("\n"))
    for variant in (crlf, trailing, indented):
        assert topo.parse(variant).paths == expected.paths
        assert topo.parse(variant).cpu_affinity == expected.cpu_affinity


def test_spaces_converted_to_tabs_and_back() -> None:
    text = sample(A100)
    tabbed = "\n".join("\t".join(line.split()) if line.startswith("GPU") else line for line in text.split("\n"))
    assert topo.parse(tabbed).paths == topo.parse(text).paths
    spaced = sample(H100_PARTIAL).replace("\t", "    ")
    assert topo.parse(spaced).paths == topo.parse(sample(H100_PARTIAL)).paths


def test_four_and_seven_gpu_matrices() -> None:
    four = topo.parse(matrix(all_pairs(4, "NV6")))
    assert four.gpu_count == 4 and set(four.paths.values()) == {"NV6"}
    seven = topo.parse(matrix(all_pairs(7, "NV18"), sep="   "))
    assert seven.gpu_count == 7 and len(seven.paths) == 21


def test_gb200_tray_nv18() -> None:
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\tNV18\tNV18\tSYS\tSYS\t0-71\t0\t\tN/A\n"
        "GPU1\tNV18\t X \tNV18\tNV18\tSYS\tSYS\t0-71\t0\t\tN/A\n"
        "GPU2\tNV18\tNV18\t X \tNV18\tSYS\tSYS\t72-143\t1\t\tN/A\n"
        "GPU3\tNV18\tNV18\tNV18\t X \tSYS\tSYS\t72-143\t1\t\tN/A\n"
    )
    result = topo.parse(text)
    assert result.gpu_count == 4
    assert set(result.paths.values()) == {"NV18"}
    assert result.cpu_affinity[3] == "72-143"


def test_old_mlx5_columns_and_soc() -> None:
    text = (
        "        GPU0    GPU1    mlx5_0  mlx5_1  CPU Affinity\n"
        "GPU0     X      SOC     PIX     SOC     0-11\n"
        "GPU1    SOC      X      SOC     PIX     12-23\n"
        "mlx5_0  PIX     SOC      X      SOC\n"
        "mlx5_1  SOC     PIX     SOC      X\n"
    )
    result = topo.parse(text)
    assert result.paths == {(0, 1): "SYS"}  # SOC is the old name of SYS
    assert result.nic_columns == ("mlx5_0", "mlx5_1")
    assert result.nic_paths[(0, "mlx5_0")] == "PIX"
    assert result.cpu_affinity == {0: "0-11", 1: "12-23"}


def test_glued_cells_are_split() -> None:
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV12NV12\nGPU1\tNV12 X\tNV12\nGPU2\tNV12\tNV12\t X \n"
    assert topo.parse(text).paths == {(0, 1): "NV12", (0, 2): "NV12", (1, 2): "NV12"}


def test_glued_row_label() -> None:
    text = "\tGPU0\tGPU1\nGPU0 X\tNV4\nGPU1NV4\t X \n"
    assert topo.parse(text).paths == {(0, 1): "NV4"}


def test_blank_cell_recovered_from_its_mirror() -> None:
    text = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \t\tPHB\nGPU1\tPIX\t X \tPHB\nGPU2\tPHB\tPHB\t X \n"
    assert topo.parse(text).paths == {(0, 1): "PIX", (0, 2): "PHB", (1, 2): "PHB"}


def test_empty_and_na_affinity_values() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV2\tN/A\tN/A\t\tN/A\nGPU1\tNV2\t X \n"
    result = topo.parse(text)
    assert result.cpu_affinity == {0: None, 1: None}
    assert result.numa_affinity == {0: None, 1: None}


def test_ambiguous_damaged_row_names_the_line() -> None:
    text = (
        "        GPU0    GPU1    GPU2\nGPU0     X      NV12    NV12\nGPU1    NV12    NV12\nGPU2    NV12    NV12     X\n"
    )
    with pytest.raises(ParseError) as info:
        topo.parse(text)
    assert info.value.line_no == 3
    assert "GPU1" in str(info.value)


def test_garbage_cell_names_row_and_column() -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tNV1?\nGPU1\tNV12\t X \n"
    with pytest.raises(ParseError, match="row GPU0, column GPU1") as info:
        topo.parse(text)
    assert info.value.line_no == 2


def test_asymmetric_matrix_names_both_cells() -> None:
    text = matrix([[" X ", "NV12"], ["PIX", " X "]])
    with pytest.raises(ParseError, match=r"row GPU0 column GPU1 is 'NV12' but row GPU1 column GPU0 is 'PIX'"):
        topo.parse(text)


def test_missing_gpu_row_is_an_error_not_a_smaller_matrix() -> None:
    text = "\n".join(sample(A100).split("\n")[:4] + sample(A100).split("\n")[5:])
    with pytest.raises(ParseError, match="GPU3 is in the header but its row is missing"):
        topo.parse(text)


def test_no_header_is_an_error() -> None:
    with pytest.raises(ParseError, match="header line starting with GPU0"):
        topo.parse("hello\nworld\n")


def test_topo_mp_is_flagged_pcie_only() -> None:
    text = "$ nvidia-smi topo -mp\n" + matrix(all_pairs(2, "PXB"))
    assert topo.parse(text).pcie_only
    whole_pcie_legend = matrix(all_pairs(2, "PXB")) + "\nLegend:\n\n" + "\n".join(f"  {c} = ..." for c in PCIE_LEGEND)
    assert topo.parse(whole_pcie_legend).pcie_only
    assert topo.parse(whole_pcie_legend).notes == ()
    assert not topo.parse(matrix(all_pairs(2, "PXB"))).pcie_only
    assert topo.parse(matrix(all_pairs(2, "PXB")), pcie_only=True).pcie_only


PCIE_LEGEND = ["X", "SYS", "NODE", "PHB", "PXB", "PIX"]


@pytest.mark.parametrize("kept", range(len(PCIE_LEGEND) - 1), ids=lambda kept: f"legend-cut-after-{PCIE_LEGEND[kept]}")
def test_legend_cut_before_nv_is_topo_m(kept: int) -> None:
    # A topo -m legend cut before PIX/NV# lacks NV# like -mp's, but also a PCIe class: it is no -mp legend.
    legend = "\nLegend:\n\n" + "\n".join(f"  {c} = ..." for c in PCIE_LEGEND[: kept + 1])
    result = topo.parse(matrix(all_pairs(8, "PHB")) + legend)
    assert not result.pcie_only
    assert result.paths[(0, 7)] == "PHB"
    assert any("stops before its NV# line" in text for _, text in result.notes)


def test_legend_with_nv_takes_no_note() -> None:
    legend = "\nLegend:\n\n" + "\n".join(f"  {c} = ..." for c in [*PCIE_LEGEND, "NV#"])
    result = topo.parse(matrix(all_pairs(4, "PHB")) + legend)
    assert (result.pcie_only, result.notes) == (False, ())


P2P_TEXT = """$ nvidia-smi topo -p2p r
 \tGPU0\tGPU1\tGPU2\tGPU3\t
 GPU0\tX\tOK\tOK\tCNS\t
 GPU1\tOK\tX\tOK\tCNS\t
 GPU2\tOK\tOK\tX\tNS\t
 GPU3\tCNS\tCNS\tTNS\tX\t

Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""


def test_topo_p2p_matrix() -> None:
    result = topo_p2p.parse(P2P_TEXT)
    assert result.gpu_count == 4
    assert result.capabilities == ("read",)
    assert result.status[(0, 1)] == "ok"
    assert result.status[(0, 3)] == "chipset_not_supported"
    assert result.status[(2, 3)] == "not_supported"
    assert result.status[(3, 2)] == "topology_not_supported"  # ordered pairs, asymmetry allowed
    assert len(result.status) == 12


def test_topo_p2p_capability_hint_and_unknown() -> None:
    text = P2P_TEXT.split("\n", 1)[1]
    assert topo_p2p.parse(text).capabilities == ()
    assert topo_p2p.parse(text, capability="rw").capabilities == ("read", "write")
    assert topo_p2p.parse(text, capability="n").capabilities == ("nvlink",)
    with pytest.raises(ParseError, match="unknown topo -p2p capability"):
        topo_p2p.parse(text, capability="z")


def test_topo_p2p_without_its_header_line_is_noted(tmp_path: Path) -> None:
    # Issue 28: the table reader's "header line missing" note was dropped for topo -p2p (topo -m kept it).
    lines = P2P_TEXT.split("\n")
    headerless = "\n".join(line for line in lines if not line.startswith(" \tGPU0"))
    assert topo_p2p.parse(headerless).notes and not topo_p2p.parse(P2P_TEXT).notes
    path = tmp_path / "p2p.txt"
    path.write_text(headerless, encoding="utf-8")
    assert any("header line missing" in note for note in load_evidence([path]).evidence_notes[str(path)])
