"""The shipped rack evidence sets give what docs/racks.md says, and a rack's per-tray files are read on their
own (issue 24, section 5)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from conftest import DATA, REPO

RACK = DATA / "rack"
SUITE = "--nvlink-suite=gb200-nvl72"
SKIP = "--nvlink-evidence-missing=skip"


def _run(pytester: pytest.Pytester, *evidence: Path) -> pytest.RunResult:
    return pytester.runpytest(SUITE, *(f"--nvlink-evidence={path}" for path in evidence), SKIP, "-rf")


def test_the_healthy_rack_set_is_healthy_against_its_own_suite(pytester: pytest.Pytester) -> None:
    # Its nvlink -s files print 53.125 GB/s per NVLink5 link, as nvidia-smi does on GB200 (make_rack.py's source).
    result = _run(pytester, RACK / "healthy")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=329, skipped=792)
    result.stdout.fnmatch_lines(["partial audit: 329 of 761 checks had evidence (432 without evidence, *"])


def test_the_wrong_clique_set_fails_tray_6_and_its_traffic(pytester: pytest.Pytester) -> None:
    result = _run(pytester, RACK / "wrong-clique")
    result.assert_outcomes(failed=3, passed=326, skipped=792)
    result.stdout.fnmatch_lines(
        [
            "FAILED nvlink/test_collectives.py::test_collective_busbw[[]all_reduce[]] - *",
            "FAILED nvlink/test_collectives.py::test_nccl_transport - *",
            "FAILED nvlink/test_rack.py::test_rack_clique[[]tray6[]] - *",
        ],
        consecutive=False,
    )


def test_the_net_ib_set_fails_the_transport_audit_and_the_all_reduce(pytester: pytest.Pytester) -> None:
    result = _run(pytester, RACK / "net-ib")
    result.assert_outcomes(failed=2, passed=327, skipped=792)
    result.stdout.fnmatch_lines(["*rack traffic left NVLink: NCCL used NET between trays on 288 of 288 channel(s)*"])


def _per_tray_files(folder: Path) -> Path:
    """The healthy set's nvidia-smi -q as one file per tray, each named after its host; no run over the rack."""
    folder.mkdir()
    text = (RACK / "healthy" / "nvidia-smi-q-trays01-09.txt").read_text(encoding="utf-8")
    for part in text.split("host: ")[1:]:
        host, output = part.split("\n", 1)
        (folder / f"{host.strip()}.txt").write_text(output, encoding="utf-8")
    for tray in (RACK / "healthy" / "nvidia-smi-q").iterdir():
        shutil.copy(tray, folder / tray.name)
    return folder


def test_per_tray_files_named_after_their_hosts_are_read_on_their_own(pytester: pytest.Pytester) -> None:
    folder = _per_tray_files(pytester.path / "trays")
    assert len(list(folder.iterdir())) == 18
    result = pytester.runpytest(SUITE, f"--nvlink-evidence={folder}", SKIP, "-k", "rack or fabric or gpu_count")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    # Trays present and in one clique are facts of nvidia-smi -q; send/recv needs a run over the rack.
    result.assert_outcomes(passed=1 + 1 + 18 + 18 + 72, skipped=18, deselected=result.parseoutcomes()["deselected"])


def test_per_tray_files_beside_host_sections_need_no_rank_placement(pytester: pytest.Pytester) -> None:
    healthy = RACK / "healthy"
    result = _run(
        pytester, healthy / "nvidia-smi-q-trays01-09.txt", healthy / "nvidia-smi-q", healthy / "nvlink-status.txt"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*test_nvlink_speed * 72 * 0 *", "*test_rack_trays * 1 * 0 *"], consecutive=False)


def _shown_rack_examples() -> list[tuple[str, str]]:
    """Each rack command of docs/racks.md's examples block with its trailing comment (green or red)."""
    text = (REPO / "docs" / "racks.md").read_text(encoding="utf-8")
    block = text.split("## The shipped rack examples", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [
        (command.strip(), comment.strip())
        for command, _, comment in (line.partition("# ") for line in block.splitlines())
    ]


@pytest.mark.parametrize(("command", "comment"), _shown_rack_examples(), ids=lambda value: value.split("/")[-1][:40])
def test_the_rack_examples_are_green_and_red_as_docs_racks_says(
    pytester: pytest.Pytester, command: str, comment: str
) -> None:
    argv = shlex.split(command)
    assert argv[0] == "pytest" and comment in ("green", "red")
    args = [arg.replace("=tests/", f"={REPO}/tests/") for arg in argv[1:]]
    result = pytester.runpytest(*args)
    assert result.ret == (pytest.ExitCode.OK if comment == "green" else pytest.ExitCode.TESTS_FAILED), command
