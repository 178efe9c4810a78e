"""nvidia-smi nvlink -s / -e / -c / -R parsing."""

from __future__ import annotations

import pytest
from conftest import sample

from pytest_nvlink.sources.evidence.parsers import nvlink
from pytest_nvlink.sources.evidence.parsers.common import ParseError

STATUS_SAMPLE = "nvlink/h100-sxm-8gpu-aws-p5-nvlink-status.txt"
ERRORS_SAMPLE = "nvlink/a100-sxm4-40gb-vm-brev-nvlink-e-all.txt"


def test_h100_status_8_gpus_18_links() -> None:
    report = nvlink.parse(sample(STATUS_SAMPLE))
    assert report.kind == nvlink.STATUS
    assert [g.index for g in report.gpus] == list(range(8))
    assert {g.name for g in report.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert report.gpus[0].uuid == "GPU-a13fd687-df01-df63-bd60-ecc0de70cc45"
    for gpu in report.gpus:
        assert [link.link for link in gpu.links] == list(range(18))
        assert all(link.active and link.speed_gbps == 26.562 for link in gpu.links)


def test_a100_errors_with_banners() -> None:
    report = nvlink.parse(sample(ERRORS_SAMPLE))
    assert report.kind == nvlink.ERRORS
    assert len(report.gpus) == 8
    assert report.gpu(7) is not None
    for gpu in report.gpus:
        assert len(gpu.links) == 12
        for link in gpu.links:
            assert link.errors == {"replay": 0, "recovery": 0, "crc_flit": 0}
            assert link.active is None  # -e says nothing about link state
    assert report.gpus[3].uuid == "GPU-46a33459-81fa-9dcf-9ed9-9a9425a4abf5"


def test_inactive_links_and_crlf() -> None:
    text = "GPU 0: NVIDIA H100 (UUID: GPU-1)\r\n\t Link 0: 26.562 GB/s\r\n\t Link 1: <inactive>\r\n"
    gpu = nvlink.parse(text).gpus[0]
    assert [(link.active, link.speed_gbps) for link in gpu.links] == [(True, 26.562), (False, None)]


@pytest.mark.parametrize(
    "message",
    [
        "NVML: Unable to retrieve NVLink information as all links are inActive",
        "NVML: Unable to retrieve NVLink information as all links are inactive",
        "NVML: UNABLE TO RETRIEVE NVLINK INFORMATION AS ALL LINKS ARE INACTIVE",
    ],
)
def test_all_links_inactive_message(message: str) -> None:
    text = f"GPU 0: NVIDIA L40S (UUID: GPU-a)\n\t {message}\nGPU 1: NVIDIA L40S (UUID: GPU-b)\n\t {message}\n"
    report = nvlink.parse(text)
    assert report.kind == nvlink.STATUS
    assert [(g.all_inactive, g.links) for g in report.gpus] == [(True, ()), (True, ())]


def test_newer_error_counter_names() -> None:
    text = (
        "GPU 0: NVIDIA B200 (UUID: GPU-x)\n"
        "\t Link 0: Tx packets: 123\n"
        "\t Link 0: Rx bytes: 4567\n"
        "\t Link 0: CRC FLIT Errors: 2\n"
        "\t Link 0: CRC DATA Errors: 3\n"
        "\t Link 0: ECC DATA Errors: 4\n"
        "\t Link 0: Replay Errors: 5\n"
        "\t Link 0: Recovery Errors: 6\n"
        "\t Link 0: Effective BER: 1.5e-15\n"
        "\t Link 0: Symbol Errors: N/A\n"
    )
    link = nvlink.parse(text).gpus[0].links[0]
    assert link.errors == {"crc_flit": 2, "crc_data": 3, "ecc_data": 4, "replay": 5, "recovery": 6}
    assert link.counters["Tx packets"] == "123"
    assert link.counters["Symbol Errors"] == "N/A"


def test_capabilities() -> None:
    text = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
        "\t Link 0, P2P is supported: true\n"
        "\t Link 0, Access to system memory supported: true\n"
        "\t Link 0, P2P atomics supported: true\n"
        "\t Link 0, SLI is supported: false\n"
    )
    report = nvlink.parse(text)
    assert report.kind == nvlink.CAPS
    assert report.gpus[0].links[0].capabilities == {
        "p2p_is_supported": True,
        "access_to_system_memory_supported": True,
        "p2p_atomics_supported": True,
        "sli_is_supported": False,
    }


def test_remote_link_map() -> None:
    text = (
        "GPU 0: NVIDIA Tesla V100-SXM2-32GB (UUID: GPU-1)\n"
        "\t Link 0: Remote Device 00000000:1B:00.0: Link 3\n"
        "\t Link 1: Remote Device Type: Switch\n"
    )
    report = nvlink.parse(text)
    assert report.kind == nvlink.REMOTE
    first, second = report.gpus[0].links
    assert (first.remote, first.remote_link) == ("00000000:1B:00.0", 3)
    assert (second.remote, second.remote_link) == ("Switch", None)


def test_concatenated_status_and_errors_merge_per_link() -> None:
    text = (
        "GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n"
        "GPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 0: Replay Errors: 7\n"
    )
    report = nvlink.parse(text)
    assert report.kind == "nvlink_mixed"
    link = report.gpus[0].links[0]
    assert (link.active, link.errors) == (True, {"replay": 7})


def test_job_log_noise_is_skipped() -> None:
    text = "srun: job 42 started\nGPU 0: NVIDIA H100 (UUID: GPU-1)\n\t Link 0: 26.562 GB/s\n+ echo done\n"
    assert len(nvlink.parse(text).gpus[0].links) == 1


@pytest.mark.parametrize(
    ("text", "line_no", "fragment"),
    [
        ("\t Link 0: 26.562 GB/s\n", 1, "header before the first Link line"),
        ("GPU 0: X (UUID: GPU-1)\n\t Link 0: fast\n", 2, "Link N"),
        ("GPU 0: X (UUID: GPU-1)\n\t Link 0: 1 GB/s\n\t Link 0: 2 GB/s\n", 3, "appears twice"),
        ("GPU 0: X (UUID: GPU-1)\n\t Link 0: 1 GB/s\nGPU 1 X (UUID: GPU-2)\n", 3, "GPU header"),
        ("GPU 0: X (UUID: GPU-1)\nGPU 0: Y (UUID: GPU-2)\n\t Link 0: 1 GB/s\n", 2, "GPU 0 is"),
        ("GPU 0: X (UUID: GPU-1)\n\t Link 0: Replay Errors: many\n", 2, "a number or N/A"),
    ],
)
def test_damaged_input_names_the_line(text: str, line_no: int, fragment: str) -> None:
    with pytest.raises(ParseError, match=fragment) as info:
        nvlink.parse(text)
    assert info.value.line_no == line_no


def test_no_gpu_headers_is_an_error() -> None:
    with pytest.raises(ParseError, match="GPU n: NAME"):
        nvlink.parse("nothing here\n")


def test_a_counter_line_lost_from_a_block_before_the_last_is_noted() -> None:
    text = (
        "GPU 0: NVIDIA B200 (UUID: GPU-a)\n"
        "\t Link 0: Tx packets: 10\n\t Link 0: Symbol Errors: 0\n"
        "\t Link 1: Tx packets: 10\n\t Link 1: Symbol Errors: 0\n"
        "GPU 1: NVIDIA B200 (UUID: GPU-b)\n"
        "\t Link 0: Tx packets: 10\n\t Link 0: Symbol Errors: 0\n"
        "\t Link 1: Tx packets: 10\n\t Link 1: Symbol Errors: 0\n"
    )
    assert nvlink.parse(text).notes == ()
    damaged = text.replace("\t Link 1: Tx packets: 10\n", "", 1)  # from GPU 0's block, not the last one
    (note,) = nvlink.parse(damaged).notes
    assert note[0] == 1 and "GPU 0 link 1 lacks counter line(s) 'Tx packets'" in note[1]
