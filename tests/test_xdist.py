"""pytest-xdist (``-n 2``): one probe and one measurement campaign, in the controller; nothing lost.

The workers judge the node the controller handed them (snapshot JSON in ``workerinput``), and the
controller writes the snapshot, the summary and the JUnit suite properties.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import SNAPSHOTS
from test_plugin_live import two_gpu_node  # noqa: F401 - the fixture is used by name

from pytest_nvlink.model.document import SnapshotError
from pytest_nvlink.plugin.handover import node_from_text, node_text
from pytest_nvlink.sources.snapshot.file import load_snapshot

# Counts, across the controller and both workers, every probe and every measurement campaign.
COUNTING = """
import os
import pytest_nvlink.measure.live as live
import pytest_nvlink.sources.live.probe as nvml_probe

def _counted(module, name):
    real = getattr(module, name)
    def counted(*args, **kwargs):
        with open({log!r}, "a", encoding="utf-8") as log:
            log.write(f"{{name}} {{os.getpid()}}\\n")
        return real(*args, **kwargs)
    setattr(module, name, counted)

for _module, _name in ((nvml_probe, "probe_node"), (live, "measure_p2p"), (live, "measure_collectives")):
    _counted(_module, _name)
"""


def _suite_properties(xml_path: Path) -> dict[str, str]:
    root = ET.parse(xml_path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    found = suite.find("properties")
    return {p.get("name", ""): p.get("value", "") for p in (found if found is not None else [])}


def _case_properties(xml_path: Path, name: str) -> dict[str, str]:
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        if case.get("name") == name:
            return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    raise AssertionError(f"no test case {name}")


def test_replay_under_xdist_keeps_summary_save_and_junit(pytester: pytest.Pytester) -> None:
    xml_path, saved = pytester.path / "junit.xml", pytester.path / "saved.json"
    result = pytester.runpytest_subprocess(
        "--nvlink-suite=h100-8gpu",
        "--nvlink-replay=h100-8gpu-degraded",
        "-n",
        "2",
        f"--junitxml={xml_path}",
        f"--nvlink-save={saved}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=30, passed=358)
    result.stdout.fnmatch_lines(
        [
            "*pytest-nvlink summary*",
            "topology (nvidia-smi topo -m layout*",
            "GPU0 *X *NV18 *NV18 *NV16!NV18*",
            "P2P unidirectional GB/s*",
            "worst unidirectional pair: GPU 6 -> GPU 2 at 36.8 GB/s",
            "all_reduce *4096 *8 *352.4 *400.0 *BELOW",
            "test_p2p_status *54 *2 *0 *GPU 2 -> GPU 6: P2P not usable*",
        ]
    )
    props = _suite_properties(xml_path)
    assert props["nvlink_suite"] == "h100-8gpu"
    assert props["gpu_count"] == "8"
    assert props["gpu3"].startswith("NVIDIA H100 80GB HBM3 uuid=GPU-")
    assert _case_properties(xml_path, "test_nvlink_active_links[gpu3]")["measured"] == "16"
    node = load_snapshot(saved)
    assert len(node.measurements.p2p) == 3 * 56
    assert sorted(m.op for m in node.measurements.collectives)[:1] == ["all_gather"]
    assert node.measurements.nccl is not None


def test_live_under_xdist_probes_and_measures_once_in_the_controller(
    pytester: pytest.Pytester,
    two_gpu_node: None,  # noqa: F811 - the fixture imported above
) -> None:
    log, xml_path, saved = pytester.path / "calls.log", pytester.path / "junit.xml", pytester.path / "saved.json"
    pytester.makepyfile(counting_plugin=COUNTING.format(log=str(log)))
    result = pytester.runpytest_subprocess(
        f"--nvlink-suite={pytester.path / 'suite.toml'}",
        "--nvlink-backend=gloo",
        "-n",
        "2",
        f"--junitxml={xml_path}",
        f"--nvlink-save={saved}",
        "-p",
        "no:cacheprovider",
        "-p",
        "fake_nvml_plugin",
        "-p",
        "counting_plugin",
        timeout=300,
    )
    calls = log.read_text(encoding="utf-8").split()
    names = calls[::2]
    assert sorted(names) == ["measure_collectives", "measure_p2p", "probe_node"], calls
    assert len(set(calls[1::2])) == 1, "the controller alone probes and measures"
    # The campaign ran before the workers started, and its progress reached the terminal.
    result.stdout.fnmatch_lines(["nvlink: collectives: starting 2 gloo ranks", "*gw0*", "*gw1*"])
    outcomes = result.parseoutcomes()
    # Two GPUs, no CUDA: the 2 x 4 P2P items fail with the reason; gloo gives no NCCL log to audit; and
    # with no GPU traffic the 2 PCIe items cannot sample the generation under load.
    # The two test_xid items pass: the controller listened for Xid events and the fake NVML sent none. The
    # controller measured the host links too: the 2 test_host_link items fail, CUDA sees no GPU.
    assert (outcomes["passed"], outcomes["failed"]) == (37 - 2 * 4 - 1 - 2 - 2, 2 * 4 + 1 + 2 + 2)
    result.stdout.fnmatch_lines(["*GPU 0: host link not measured: the host->device copy failed: not visible to CUDA*"])
    result.stdout.fnmatch_lines(["*could not determine the PCIe generation of GPU 0 under load*"])
    result.stdout.fnmatch_lines(["*could not determine the unidirectional P2P bandwidth GPU 0 -> GPU 1: *CUDA*"])
    result.stdout.fnmatch_lines(["collective *size MiB*", "all_reduce *1 *2 *ok"])
    assert _suite_properties(xml_path)["gpu_count"] == "2"
    collectives = load_snapshot(saved).measurements.collectives
    assert sorted(m.op for m in collectives) == [
        "all_gather",
        "all_reduce",
        "all_to_all",
        "broadcast",
        "reduce_scatter",
    ]
    assert all(m.correct and m.busbw_gbps for m in collectives)


def test_the_handed_node_round_trips_with_its_source_and_measurements() -> None:
    node = load_snapshot(SNAPSHOTS / "h100-8gpu-degraded.json")
    node.source = "live"
    back = node_from_text(node_text(node))
    assert back == node
    assert back.source == "live"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "missing (controller and worker run different pytest-nvlink versions?)"),
        ("{not json", "not JSON"),
        ('{"kind": "other"}', "not a pytest-nvlink snapshot"),
    ],
)
def test_a_worker_without_a_usable_node_says_why(text: object, message: str) -> None:
    with pytest.raises(SnapshotError, match="node handed over by the pytest-xdist controller") as caught:
        node_from_text(text)
    assert message in str(caught.value)
