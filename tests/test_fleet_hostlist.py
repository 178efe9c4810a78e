from __future__ import annotations

import pytest

from pytest_nvlink.core.hostlist import MAX_HOSTS, HostlistError, expand, first_host


@pytest.mark.parametrize(
    ("expression", "hosts"),
    [
        ("gpu001", ["gpu001"]),
        ("gpu[001-003,070],cpu-a[1-3]", ["gpu001", "gpu002", "gpu003", "gpu070", "cpu-a1", "cpu-a2", "cpu-a3"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),  # unpadded: the width of the low bound as written
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("node[1-2]-ib", ["node1-ib", "node2-ib"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a,b,a", ["a", "b"]),  # duplicates named once
        (" gpu[1 - 2] ", ["gpu1", "gpu2"]),
        ("[1-2]", ["1", "2"]),
        ("x[5]", ["x5"]),
        ("x[3-3]", ["x3"]),
    ],
)
def test_expand(expression: str, hosts: list[str]) -> None:
    assert expand(expression) == hosts


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("", "empty name"),
        ("a,,b", "empty name"),
        ("a,", "empty name"),
        ("gpu[1-3", "'\\[' without '\\]'"),
        ("gpu1-3]", "'\\]' without '\\['"),
        ("gpu[[1-3]]", "nests brackets"),
        ("gpu[3-1]", "backwards"),
        ("gpu[a-b]", "numbers and low-high ranges"),
        ("gpu[]", "numbers and low-high ranges"),
        ("gpu[1-]", "numbers and low-high ranges"),
        ("gpu[1,,2]", "numbers and low-high ranges"),
        ("gpu 1", "space"),
        (f"gpu[0-{MAX_HOSTS}]", "more than"),
        ("a[0-999]b[0-9999]", "more than"),
    ],
)
def test_refused(expression: str, reason: str) -> None:
    with pytest.raises(HostlistError, match=reason):
        expand(expression)


def test_first_host_does_not_expand_the_rest() -> None:
    assert first_host(f"gpu[007-{MAX_HOSTS - 1}],login1") == "gpu007"
    assert first_host("rack1-node[3,5]-ib") == "rack1-node3-ib"
