"""The launcher's rack snapshot judged by a rack suite (gpus_per_host): 3 pretend trays x 2 ranks on gloo."""

from __future__ import annotations

import json
from pathlib import Path

from launch_procs import SUITE, THRESHOLDS, free_port, launch, torchrun_envs, tray_node

from pytest_nvlink.model import FabricInfo
from pytest_nvlink.model.document import save_snapshot

HOSTS = ["tray-a", "tray-a", "tray-b", "tray-b", "tray-c", "tray-c"]
CLUSTER = "5c1e4a3b-7f0e-4d55-9a0b-2a7e3c1d9f10"
RACK_KEYS = """
[fabric]
# Source: tests only: the pretend trays carry a clique, as NVL72 trays do.
clique_required = true

[p2p]
# Source: tests only: any figure gloo send/recv produces on a loaded CPU passes.
sendrecv_min_gbps = 0.0001
"""


def _rack_inputs(folder: Path) -> tuple[Path, Path, Path]:
    suite = folder / "rack-suite.toml"
    suite.write_text(SUITE.format(gpus=6).replace("gpu_count = 6\n", "gpu_count = 6\ngpus_per_host = 2\n"))
    thresholds = folder / "rack-thresholds.toml"
    thresholds.write_text(THRESHOLDS + RACK_KEYS)
    for host, clique in (("tray-a", 5), ("tray-b", 5), ("tray-c", 6)):
        node = tray_node(host)
        for gpu in node.gpus:
            gpu.fabric = FabricInfo(state="completed", status="success", clique_id=clique, cluster_uuid=CLUSTER)
        save_snapshot(node, folder / "trays" / f"{host}.json")
    return suite, thresholds, folder / "trays" / "{host}.json"


def test_launched_rack_is_judged_tray_by_tray(tmp_path: Path) -> None:
    suite, thresholds, pattern = _rack_inputs(tmp_path)
    out = tmp_path / "rack"
    args = ["rack", "--suite", str(suite), "--thresholds", str(thresholds), "--backend", "gloo"]
    args += ["--out-dir", str(out), "--tray-snapshot", str(pattern), "--cross-peers", "1"]
    judging = ["--", "-p", "no:randomly", "-k", "rack or test_path or test_p2p_status"]
    finished = launch([*args, *judging], torchrun_envs(6, free_port(), HOSTS), tmp_path)
    assert [f.returncode for f in finished[1:]] == [0] * 5, [f.stderr[-1500:] for f in finished]
    assert finished[0].returncode == 1  # tray-c sits in another clique

    items = json.loads((out / "results.json").read_text())["items"]
    outcome = {item["nodeid"].split("::")[-1]: item for item in items}
    failed = sorted(name for name, item in outcome.items() if item["outcome"] == "fail")
    assert failed == ["test_rack_clique[tray2]"]
    assert "tray 2 (host tray-c) is in clique 6 of cluster" in outcome["test_rack_clique[tray2]"]["message"]
    assert "majority (2 of 3 trays) is in clique 5" in outcome["test_rack_clique[tray2]"]["message"]
    for name in ("test_rack_trays", "test_rack_tray[tray1]", "test_rack_sendrecv[tray0]", "test_rack_sendrecv[tray2]"):
        assert outcome[name]["outcome"] == "pass", outcome[name]["message"]
    # Between trays the one-host pair checks do not apply (send/recv judges those pairs); within a tray they run.
    assert outcome["test_path[gpu1-gpu2]"]["outcome"] == "not_applicable"
    assert "sit on different hosts" in outcome["test_path[gpu1-gpu2]"]["message"]
    assert outcome["test_path[gpu2-gpu3]"]["outcome"] == "pass"
