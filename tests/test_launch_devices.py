"""Launched ranks open the GPU the process sees (srun --gpus-per-task=1, --gpu-bind, one-GPU pods)."""

from __future__ import annotations

import types

import pytest
from launch_procs import tray_node

from pytest_nvlink.measure.launched import Member, contradiction
from pytest_nvlink.measure.worker import visible_device
from pytest_nvlink.model import trays as rack
from pytest_nvlink.model.document import snapshot_document


def _torch(count: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(cuda=types.SimpleNamespace(device_count=lambda: count))


@pytest.mark.parametrize("local_rank", [0, 1, 3, 7])
def test_a_task_bound_to_one_gpu_opens_cuda0_whatever_its_local_rank(local_rank: int) -> None:
    assert visible_device(_torch(1), local_rank, {"CUDA_VISIBLE_DEVICES": str(local_rank)}) == 0


def test_a_task_that_sees_the_whole_node_opens_its_local_rank() -> None:
    assert visible_device(_torch(8), 5, {}) == 5


def test_a_local_rank_past_the_visible_gpus_is_one_sentence() -> None:
    with pytest.raises(
        RuntimeError, match=r"local rank 3 has no GPU of its own: this process sees 2 \(CUDA_VISIBLE_DEVICES='4,5'\)"
    ):
        visible_device(_torch(2), 3, {"CUDA_VISIBLE_DEVICES": "4,5"})


def test_ranks_map_to_the_trays_gpus_by_uuid_before_cuda_index() -> None:
    # Two tasks bound to one GPU each: both opened cuda:0, so only the UUID says which GPU each used.
    node = tray_node("tray-a")
    probes = [rack.TrayProbe("tray-a", [0, 1], snapshot_document(node))]
    trays = rack.read_trays(probes)
    uuids = {0: node.gpus[1].uuid, 1: node.gpus[0].uuid}
    assert rack.rank_gpus(trays, {0: 0, 1: 1}, uuids) == {0: 1, 1: 0}
    torch_style = {rank: str(uuid)[4:] for rank, uuid in uuids.items()}  # torch drops the GPU- prefix
    assert rack.rank_gpus(trays, {0: 0, 1: 1}, torch_style) == {0: 1, 1: 0}


def test_two_ranks_on_one_gpu_uuid_are_a_contradiction() -> None:
    members = [Member(0, "a", 0, 0, "GPU-1"), Member(1, "a", 1, 0, "GPU-1")]
    text = contradiction(members)
    assert text is not None and text.startswith("ranks 0 and 1 both opened GPU GPU-1;")
    assert contradiction([Member(0, "a", 0, 0, "GPU-1"), Member(1, "a", 1, 0, "GPU-2")]) is None
