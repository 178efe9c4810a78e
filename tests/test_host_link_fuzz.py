"""Property tests of host-link evidence: damage to a figure line is never silent.

Deleting or garbling a line that holds a host-link figure changes the figures read or the notes, or stops
the run naming the file; lines the parsers skip are shown to hold nothing (deleting them changes nothing).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from conftest import examples, sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence
from pytest_nvlink.sources.evidence.parsers.bandwidth_test import MBS_IN_GBS

HOST_LINK_SAMPLES = [
    "nvbandwidth/constructed-h200-8gpu-host-device-only.txt",
    "bandwidthTest/a100-sxm4-40gb-quick-pinned-router-gao.txt",
    "bandwidthTest/constructed-h200-8gpu-per-device-runs-gpu5-slow.txt",
    "bandwidthTest/constructed-v100-range-mode-mbs-pinned-and-pageable.txt",
    "dcgmi-diag/v100-pcie-16gb-dcgm339-r2-verbose.txt",
    "dcgmi-diag/constructed-h100-8gpu-dcgm335-r2-verbose-gpu5-slow.txt",
    "dcgmi-diag/constructed-h100-4gpu-dcgm4-r2-verbose-entity-headings.txt",
]
Reading = tuple[frozenset[tuple[object, ...]], tuple[str, ...]]


def read(text: str) -> Reading | str:
    """The host-link figures and notes of a text, or the error that stopped the run."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "evidence.txt"
        path.write_text(text, encoding="utf-8")
        try:
            node = load_evidence([path])
        except EvidenceError as exc:
            return str(exc)
    figures = frozenset((m.gpu, m.direction, m.value, m.error, str(m.conditions)) for m in node.measurements.host_link)
    notes = tuple(note for file_notes in node.evidence_notes.values() for note in file_notes)
    return figures, notes


def _numbers(line: str) -> list[tuple[str, float]]:
    found = []
    for token in line.replace(",", " ").replace("|", " ").replace(":", " ").split():
        try:
            found.append((token, float(token)))
        except ValueError:
            continue
    return found


def figure_lines(text: str) -> list[tuple[int, str]]:
    """(line index, the token) of every line that prints a figure the reading took (in GB/s or old MB/s)."""
    reading = read(text)
    assert not isinstance(reading, str), reading
    values = {value for _, _, value, _, _ in reading[0] if isinstance(value, float)}
    found = []
    for index, line in enumerate(text.split("\n")):
        for token, number in _numbers(line):
            if any(abs(number - v) < 1e-9 or abs(number * MBS_IN_GBS - v) < 1e-9 for v in values):
                found.append((index, token))
                break
    return found


LINES = {name: figure_lines(sample(name)) for name in HOST_LINK_SAMPLES}


def test_every_sample_has_figure_lines() -> None:
    assert all(LINES.values()), {name: len(lines) for name, lines in LINES.items()}


@pytest.mark.parametrize("name", HOST_LINK_SAMPLES)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_deleting_or_garbling_a_figure_line_is_never_silent(name: str, data: st.DataObject) -> None:
    text = sample(name)
    index, token = data.draw(st.sampled_from(LINES[name]))
    lines = text.split("\n")
    if data.draw(st.booleans()):
        del lines[index]
    else:
        garbled = data.draw(st.sampled_from(["x" + token[1:], token[:-1] + "?", token.replace(".", ",", 1)]))
        lines[index] = lines[index].replace(token, garbled, 1)
    assert read("\n".join(lines)) != read(text)


# Lines each parser skips on purpose: deleting them leaves every figure and note as it was.
SKIPPED = [
    ("bandwidthTest/a100-sxm4-40gb-quick-pinned-router-gao.txt", "Running on..."),
    ("bandwidthTest/a100-sxm4-40gb-quick-pinned-router-gao.txt", "NOTE: The CUDA Samples"),
    ("bandwidthTest/constructed-h200-8gpu-per-device-runs-gpu5-slow.txt", "$ ./bandwidthTest --device=3"),
    ("dcgmi-diag/v100-pcie-16gb-dcgm339-r2-verbose.txt", "| GPU Memory"),
    ("dcgmi-diag/v100-pcie-16gb-dcgm339-r2-verbose.txt", "Successfully ran diagnostic"),
    ("dcgmi-diag/v100-pcie-16gb-dcgm339-r2-verbose.txt", "| DCGM Version"),
    ("dcgmi-diag/v100-pcie-16gb-dcgm339-r2-verbose.txt", "PU latency:"),
]


@pytest.mark.parametrize(("name", "start"), SKIPPED)
def test_skipped_lines_hold_nothing(name: str, start: str) -> None:
    text = sample(name)
    kept = [line for line in text.split("\n") if not line.lstrip().startswith(start.lstrip()) and start not in line]
    assert len(kept) < len(text.split("\n"))
    assert without_line_numbers(read("\n".join(kept))) == without_line_numbers(read(text))


def without_line_numbers(reading: Reading | str) -> object:
    """A reading whose notes no longer name lines: a deleted line moves the lines after it."""
    assert not isinstance(reading, str), reading
    return reading[0], tuple(re.sub(r"^line \d+: ", "", note) for note in reading[1])
