"""Property tests: damaged or random input gives a result or ParseError, never another exception,
and damage never turns a failing verdict into a passing one.

Example counts are CI's (the "ci" Hypothesis profile, tests/conftest.py), twice as many under "dev";
set NVLINK_FUZZ_EXAMPLES=500 for a longer hunt of the verdict property.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from all_verdicts import all_verdicts
from conftest import EVIDENCE, examples, sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_nvlink.sources.evidence.load import EvidenceError, load_evidence
from pytest_nvlink.sources.evidence.parsers import (
    bandwidth_test,
    dcgm_diag,
    detect,
    nccl_log,
    nccl_tests,
    nvbandwidth,
    nvlink,
    p2p_latency,
    smi_query,
    topo,
    topo_p2p,
)
from pytest_nvlink.sources.evidence.parsers.common import ParseError
from pytest_nvlink.verdict import Outcome

SAMPLES = sorted(p.relative_to(EVIDENCE).as_posix() for p in EVIDENCE.rglob("*.txt"))
PARSERS: dict[str, Callable[[str], object]] = {
    "topo": topo.parse,
    "topo_p2p": topo_p2p.parse,
    "nvlink": nvlink.parse,
    "nccl_tests": nccl_tests.parse,
    "p2p_latency": p2p_latency.parse,
    "nvbandwidth": nvbandwidth.parse,
    "nccl_log": nccl_log.parse,
    "nccl_log_many": lambda text: nccl_log.parse_many(text.split("\n\n")),
    "parse_any": detect.parse_any,
    "smi_query": smi_query.parse,
    "bandwidth_test": bandwidth_test.parse,
    "dcgm_diag": dcgm_diag.parse,
    "split_parts": detect.split_parts,
}
# Characters real damage is made of, plus the tokens the parsers look for, so mangling hits their paths.
NOISE = st.sampled_from(
    ["\t", " ", "\n", "\r", "X", "NV", "12", "0", "-", ".", ":", "/", "N/A", "#", "GPU", "Link", "[", "]", "é", "\x00"]
)
FUZZ = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def survives(parse: Callable[[str], object], text: str) -> None:
    """Returns normally or raises ParseError with a message; any other exception fails the test."""
    error: ParseError | None = None
    try:
        parse(text)
    except ParseError as exc:
        error = exc
    assert error is None or (error.line_no >= 0 and str(error))


@st.composite
def mangled(draw: st.DrawFn) -> str:
    text = sample(draw(st.sampled_from(SAMPLES)))
    lines = text.split("\n")
    operation = draw(st.sampled_from(["delete", "insert", "shuffle", "drop_lines", "duplicate", "truncate"]))
    if operation == "shuffle":
        return "\n".join(draw(st.permutations(lines)))
    if operation == "drop_lines":
        keep = draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
        return "\n".join(line for line, kept in zip(lines, keep, strict=True) if kept)
    if operation == "duplicate":
        index = draw(st.integers(0, len(lines) - 1))
        return "\n".join(lines[: index + 1] + lines[index:])
    if operation == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    for _ in range(draw(st.integers(1, 8))):
        position = draw(st.integers(0, len(text)))
        if operation == "delete":
            text = text[:position] + text[position + draw(st.integers(1, 6)) :]
        else:
            text = text[:position] + draw(NOISE) + text[position:]
    return text


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(text=mangled())
def test_mangled_samples(name: str, text: str) -> None:
    survives(PARSERS[name], text)


@pytest.mark.parametrize("name", sorted(PARSERS))
@FUZZ
@given(text=st.text(max_size=400) | st.lists(NOISE, max_size=80).map("".join))
def test_random_text(name: str, text: str) -> None:
    survives(PARSERS[name], text)


@settings(max_examples=examples(100), deadline=None)
@given(text=mangled())
def test_evidence_loader_only_raises_evidence_errors(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "file.txt"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        error: EvidenceError | None = None
        try:
            load_evidence([path])
        except EvidenceError as exc:
            error = exc
        assert error is None or str(error)


# --- damage never turns a failing verdict into a passing one --------------------------------------

# (suite, sample, (old, new, count) edit that makes the node faulty, or None where the suite already fails it)
FAILING_SCENARIOS: list[tuple[str, str, tuple[str, str, int] | None]] = [
    ("a100-8gpu", "topo/a100-sxm4-80gb-8gpu-distserve3.txt", ("NV12", "PHB", -1)),
    ("h100-8gpu", "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt", ("Link 5: 26.562 GB/s", "Link 5: <inactive>", 4)),
    (
        "a100-8gpu",
        "nccl-tests/a100-sxm4-40gb-8gpu-oci-bm-gpu4-allreduce.txt",
        ("131.48  230.08      0", "131.48  230.08      3", 1),
    ),
    ("h100-8gpu", "nvbandwidth/nvbandwidth-readme-example-8gpu-old-format.txt", None),
    ("h100-8gpu", "p2pBandwidthLatencyTest/a100-sxm4-80gb-8gpu-distserve3.txt", None),
    ("h100-8gpu", "nccl-debug/h20-nvlink-two-pods-p2p-cumem-nccl1781.txt", None),
    ("h100-8gpu", "topo/l40s-4gpu-pcie-only-node-sys.txt", None),
]
# Junk that real captures pick up: blank lines, interleaved warnings, terminal escapes, a stray prompt.
JUNK_LINES = st.sampled_from(
    ["", "   ", "\x1b[0m", "WARNING: infoROM is corrupted at gpu 0000:3A:00.0", "^C", "$ ", "#", "-" * 40]
)
PROPERTY_EXAMPLES = int(os.environ.get("NVLINK_FUZZ_EXAMPLES") or examples(50))  # e.g. 500 locally, for a long hunt


def _faulty_text(sample_name: str, edit: tuple[str, str, int] | None) -> str:
    text = sample(sample_name)
    if edit is None:
        return text
    old, new, count = edit
    assert old in text
    return text.replace(old, new, count)


@st.composite
def line_damage(draw: st.DrawFn, text: str) -> str:
    """Damage real captures suffer: lost, repeated or junk lines, a cut-off end, re-spaced or CRLF lines.

    Edits inside a number ("37.2" -> "377.2") or lines moved to another GPU's block are left out: they
    make another, well-formed measurement that no reader could tell from a real one.
    """
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        operation = draw(st.sampled_from(["drop_lines", "truncate", "duplicate", "junk", "respace", "crlf"]))
        if operation == "drop_lines":
            keep = draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
            lines = [line for line, kept in zip(lines, keep, strict=True) if kept] or [""]
        elif operation == "truncate":
            lines = lines[: draw(st.integers(0, len(lines)))] or [""]
        elif operation == "duplicate":
            index = draw(st.integers(0, len(lines) - 1))
            lines = lines[: index + 1] + lines[index:]
        elif operation == "junk":
            index = draw(st.integers(0, len(lines)))
            lines = [*lines[:index], draw(JUNK_LINES), *lines[index:]]
        elif operation == "respace":
            index = draw(st.integers(0, len(lines) - 1))
            lines[index] = draw(st.sampled_from([" ", "\t", "  "])).join(lines[index].split()) + draw(
                st.sampled_from(["", " ", "\t"])
            )
        else:
            lines = [line + "\r" for line in lines]
    return "\n".join(lines)


@pytest.mark.parametrize(("suite", "sample_name", "edit"), FAILING_SCENARIOS, ids=[s[1] for s in FAILING_SCENARIOS])
@settings(max_examples=PROPERTY_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damage_never_turns_a_failure_into_a_pass(
    suite: str, sample_name: str, edit: tuple[str, str, int] | None, data: st.DataObject
) -> None:
    text = _faulty_text(sample_name, edit)
    with tempfile.TemporaryDirectory() as folder:
        original = Path(folder) / "original.txt"
        original.write_text(text, encoding="utf-8")
        failing = {
            item for item, outcome in all_verdicts(load_evidence([original]), suite).items() if outcome is Outcome.FAIL
        }
        assert failing, "the scenario must start from a failing verdict"
        damaged = Path(folder) / "damaged.txt"
        damaged.write_text(data.draw(line_damage(text)), encoding="utf-8")
        try:
            node = load_evidence([damaged])
        except EvidenceError:
            return  # refusing the file is fine: the run stops with a usage error
        after = all_verdicts(node, suite)
        turned = sorted(item for item in failing if after[item] is Outcome.PASS)
        assert not turned, f"damage turned failing items into passes: {turned[:5]}"


# --- line damage of the second round: elisions, launcher prefixes, cut legends -------------------------

# (suite, sample, edit): classes 1 (nvlink -s cut short), 3 (prefixed lines) and 7 (cut topo legend).
MARKED_SCENARIOS: list[tuple[str, str, tuple[str, str, int] | None]] = [
    ("a100-8gpu", "topo/a100-sxm4-80gb-8gpu-distserve3.txt", ("NV12", "PHB", -1)),
    ("a100-8gpu", "topo/a100-sxm4-80gb-8gpu-vm-constructed-phb-legend-cut.txt", None),
    ("h100-8gpu", "topo/h100-sxm-8gpu-constructed-srun-label.txt", None),
    ("h100-8gpu", "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt", ("Link 5: 26.562 GB/s", "Link 5: <inactive>", 4)),
    ("a100-8gpu", "nvlink/a100-sxm4-80gb-8gpu-constructed-status-cut-short.txt", None),
]
ELISIONS = st.sampled_from(["...", "....", "......", "[...]", "<snip>", "(output truncated)", "  ...  "])
LAUNCHER_PREFIXES = st.sampled_from(
    ["[1,0]<stdout>:", " 0: ", "node7: ", "(WorkerDict pid=123) ", "> > ", "2024-05-01T10:00:00.5Z ", "svc-1  | "]
)


@st.composite
def marked_damage(draw: st.DrawFn, text: str) -> str:
    """A range of lines replaced by an elision marker, a prefix on every line, or the text cut in its Legend."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 2))):
        operation = draw(st.sampled_from(["elide", "prefix", "cut_legend"]))
        if operation == "elide":
            start = draw(st.integers(0, len(lines) - 1))
            end = draw(st.integers(start, len(lines)))
            lines = [*lines[:start], draw(ELISIONS), *lines[end:]]
        elif operation == "prefix":
            prefix = draw(LAUNCHER_PREFIXES)
            lines = [prefix + line for line in lines]
        else:
            legend = next((n for n, line in enumerate(lines) if "Legend:" in line), len(lines))
            lines = lines[: draw(st.integers(min(legend, len(lines)), len(lines)))] or [""]
    return "\n".join(lines)


@pytest.mark.parametrize(("suite", "sample_name", "edit"), MARKED_SCENARIOS, ids=[s[1] for s in MARKED_SCENARIOS])
@settings(max_examples=PROPERTY_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_elisions_prefixes_and_cut_legends_never_turn_a_failure_into_a_pass(
    suite: str, sample_name: str, edit: tuple[str, str, int] | None, data: st.DataObject
) -> None:
    text = _faulty_text(sample_name, edit)
    with tempfile.TemporaryDirectory() as folder:
        original = Path(folder) / "original.txt"
        original.write_text(text, encoding="utf-8")
        failing = {
            item for item, outcome in all_verdicts(load_evidence([original]), suite).items() if outcome is Outcome.FAIL
        }
        assert failing, "the scenario must start from a failing verdict"
        damaged = Path(folder) / "damaged.txt"
        damaged.write_text(data.draw(marked_damage(text)), encoding="utf-8")
        try:
            node = load_evidence([damaged])
        except EvidenceError:
            return
        after = all_verdicts(node, suite)
        turned = sorted(item for item in failing if after[item] is Outcome.PASS)
        assert not turned, f"damage turned failing items into passes: {turned[:5]}"
