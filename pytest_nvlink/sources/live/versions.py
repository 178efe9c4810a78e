"""The versions of what a live run ran with: kernel, plugin, and torch/CUDA/NCCL once a campaign loaded torch."""

from __future__ import annotations

import platform
import sys

from pytest_nvlink import __version__


def live_versions() -> dict[str, str]:
    """Versions this process can tell without importing anything: torch only if a campaign loaded it."""
    versions = {"kernel": platform.release(), "plugin": __version__}
    torch = sys.modules.get("torch")
    if torch is not None:
        versions["torch"] = str(getattr(torch, "__version__", "unknown"))
        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        if cuda:
            versions["cuda_runtime"] = str(cuda)
        versions |= _nccl_version(torch)
    return versions


def _nccl_version(torch: object) -> dict[str, str]:
    try:
        raw = torch.cuda.nccl.version()  # type: ignore[attr-defined]
    except Exception:
        return {}
    return {"nccl": ".".join(str(part) for part in raw) if isinstance(raw, tuple) else str(raw)}
