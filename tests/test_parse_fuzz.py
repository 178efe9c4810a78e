"""Property tests: damaged or random input gives a result or ParseError, never another exception."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EVIDENCE, sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_nvlink.evidence import EvidenceError, load_evidence
from pytest_nvlink.parsers import detect, nccl_log, nccl_tests, nvbandwidth, nvlink, p2p_latency, smi_query, topo
from pytest_nvlink.parsers.common import ParseError

SAMPLES = sorted(p.relative_to(EVIDENCE).as_posix() for p in EVIDENCE.rglob("*.txt"))
PARSERS: dict[str, Callable[[str], object]] = {
    "topo": topo.parse,
    "topo_p2p": topo.parse_p2p,
    "nvlink": nvlink.parse,
    "nccl_tests": nccl_tests.parse,
    "p2p_latency": p2p_latency.parse,
    "nvbandwidth": nvbandwidth.parse,
    "nccl_log": nccl_log.parse,
    "nccl_log_many": lambda text: nccl_log.parse_many(text.split("\n\n")),
    "parse_any": detect.parse_any,
    "smi_query": smi_query.parse,
    "split_parts": detect.split_parts,
}
# Characters real damage is made of, plus the tokens the parsers look for, so mangling hits their paths.
NOISE = st.sampled_from(
    ["\t", " ", "\n", "\r", "X", "NV", "12", "0", "-", ".", ":", "/", "N/A", "#", "GPU", "Link", "[", "]", "é", "\x00"]
)
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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


@settings(max_examples=25, deadline=None)
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
