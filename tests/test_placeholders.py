"""``{host}`` and ``{date}`` in output paths: expansion, file-name safety, and refusal of anything else."""

from __future__ import annotations

import re
import socket
from datetime import datetime, timedelta, timezone

import pytest

from pytest_nvlink.core.placeholders import PlaceholderError, check, expand, placeholder_values, safe_host, utc_date

VALUES = {"host": "gpu017", "date": "20261203"}


def test_host_and_date_expand_anywhere_and_repeatedly() -> None:
    assert expand("out/{date}/{host}.json", VALUES, "--nvlink-json") == "out/20261203/gpu017.json"
    assert expand("{host}-{host}.xml", VALUES, "--junitxml") == "gpu017-gpu017.xml"
    assert expand("plain/path.json", VALUES, "--nvlink-json") == "plain/path.json"


def test_doubled_braces_are_literal_braces() -> None:
    assert expand("out/{{host}}-{host}.json", VALUES, "--nvlink-json") == "out/{host}-gpu017.json"


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("out/{foo}.json", "{foo}"),
        ("out/{}.json", "{}"),
        ("out/{0}.json", "{0}"),
        ("out/{HOST}.json", "{HOST}"),
        ("out/{host!r}.json", "{host!r}"),
        ("out/{host:>9}.json", "{host:>9}"),
        ("out/{host.upper}.json", "{host.upper}"),
    ],
)
def test_an_unknown_placeholder_is_refused_naming_the_option_and_the_known_ones(template: str, shown: str) -> None:
    with pytest.raises(PlaceholderError) as info:
        expand(template, VALUES, "--nvlink-save")
    message = str(info.value)
    assert message.startswith(f"--nvlink-save: {template!r}: unknown placeholder {shown};")
    assert message.endswith("known placeholders: {host}, {date}")


@pytest.mark.parametrize("template", ["out/{host.json", "out/host}.json", "out/{", "}"])
def test_a_stray_brace_is_refused_naming_the_option(template: str) -> None:
    with pytest.raises(PlaceholderError, match=r"^pytest\.ini:nvlink_json: .*literal braces are written \{\{ and \}\}"):
        expand(template, VALUES, "pytest.ini:nvlink_json")


def test_check_refuses_before_any_value_is_known_and_accepts_good_templates() -> None:
    check("out/{host}/{date}.json", "--nvlink-json")
    expected = re.escape("--nvlink-report: 'r/{hots}.html': unknown placeholder {hots}")
    with pytest.raises(PlaceholderError, match=expected):
        check("r/{hots}.html", "--nvlink-report")


@pytest.mark.parametrize(
    ("host", "safe"),
    [
        ("gpu017.cluster.example", "gpu017.cluster.example"),
        ("a/b", "a_b"),
        ("../../etc", "____etc"),
        ("..", "_"),
        (".hidden", "hidden"),
        ("node 7;rm -rf", "node_7_rm_-rf"),
        ("", "unknown-host"),
        (None, "unknown-host"),
        ("/", "_"),
    ],
)
def test_a_host_name_becomes_one_safe_file_name(host: str | None, safe: str) -> None:
    assert safe_host(host) == safe
    assert "/" not in safe and ".." not in safe and not safe.startswith(".")


def test_the_date_is_utc_whatever_the_local_zone() -> None:
    # 23:30 on 2 Dec in UTC-5 is already 3 Dec in UTC: every node of one sweep names the same day.
    late_evening = datetime(2026, 12, 2, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert utc_date(late_evening) == "20261203"
    assert len(utc_date()) == 8 and utc_date().isdigit()


def test_values_fall_back_to_this_machines_name_and_are_sanitised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "login/01")
    now = datetime(2026, 12, 3, 7, 0, tzinfo=timezone.utc)
    assert placeholder_values(None, now) == {"host": "login_01", "date": "20261203"}
    assert placeholder_values("gpu/../x", now)["host"] == "gpu___x"
