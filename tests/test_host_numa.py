"""Binding the host-link worker to a NUMA node and reading back where its pinned buffers landed."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_nvlink.measure.host_numa import Binding, NumaBinder, pages_of_mappings, parse_cpulist, placement

MAPS = """\
7f0000000000-7f0020000000 rw-s 00000000 00:05 1234 /dev/nvidiactl
7f0020000000-7f0040000000 rw-s 00000000 00:05 1235 /dev/nvidiactl
7f0050000000-7f0050001000 r--p 00000000 00:00 0
"""
NUMA_MAPS = """\
7f0000000000 default file=/dev/nvidiactl dirty=131072 N1=131072 kernelpagesize_kB=4
7f0020000000 default file=/dev/nvidiactl dirty=131072 N0=2 N1=131070 kernelpagesize_kB=4
7f0050000000 default anon=1 N0=1 kernelpagesize_kB=4
"""


def test_cpulists_read_as_the_kernel_writes_them() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("") == set()


def test_pages_are_counted_per_node_over_the_mappings_that_hold_the_buffers() -> None:
    pages = pages_of_mappings(MAPS, NUMA_MAPS, (0x7F0000001000, 0x7F0020000040))
    assert pages == {0: 2, 1: 262142}
    assert pages_of_mappings(MAPS, NUMA_MAPS, (0x10,)) == "placement not checked: no mapping holds 0x10"


def test_buffers_on_another_node_than_the_binding_record_the_node_they_are_on() -> None:
    bound = Binding(0, "CPU affinity set to node 0's 4 CPUs; buffers placed by first touch")
    node, note = placement(bound, {0: 2, 1: 262142})
    assert node == 1
    assert note.endswith("but the buffers' pages are on node 1 (node 0: 2 pages, node 1: 262142 pages)")
    assert placement(bound, {0: 10})[0] == 0
    assert placement(Binding(None, "not bound: why"), {0: 10}) == (None, "not bound: why")


def test_a_node_whose_cpus_this_process_may_not_use_is_not_bound(tmp_path: Path) -> None:
    (tmp_path / "node3").mkdir()
    (tmp_path / "node3" / "cpulist").write_text(f"{max(os.sched_getaffinity(0)) + 4096}\n")
    binding = NumaBinder(sysfs_nodes=str(tmp_path)).bind(3)
    assert binding == Binding(None, "not bound: none of node 3's CPUs is allowed to this process (cgroup/cpuset)")
    missing = NumaBinder(sysfs_nodes=str(tmp_path)).bind(5)
    assert missing.node is None and missing.note.startswith(f"not bound: {tmp_path / 'node5' / 'cpulist'} unreadable")
    assert NumaBinder(proc_self=str(tmp_path)).pages_on((1,)) == (
        f"placement not checked: [Errno 2] No such file or directory: '{tmp_path / 'maps'}'"
    )
