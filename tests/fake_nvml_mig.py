"""The fake ``pynvml``'s MIG mode: ``nvmlDeviceGetMigMode`` as nvidia-ml-py answers it.

Kept apart from :mod:`fake_nvml_state` (which mixes it into ``FakeNvml``) so that each file stays small.
Like the real wrapper it returns a *list* ``[current, pending]`` of ``NVML_DEVICE_MIG_ENABLE`` /
``NVML_DEVICE_MIG_DISABLE``, not a tuple or a struct. A GPU whose node records no MIG mode answers the NVML
error its unknown reason names (``gpu3.mig_mode = "NVML: Insufficient Permissions"``), else NotSupported, as
a GPU without MIG does (the probe's note that it took NotSupported as disabled answers NotSupported too).
"""

from __future__ import annotations

from typing import Any

from fake_nvml_api import C, NVMLError

_MIG_CODES = {"enabled": C["NVML_DEVICE_MIG_ENABLE"], "disabled": C["NVML_DEVICE_MIG_DISABLE"]}
_NO_MIG_NOTE_START = "the GPU has no MIG"


class MigMixin:
    """``nvmlDeviceGetMigMode`` of ``FakeNvml``; it provides ``_dev``, ``_unknown`` and ``node``."""

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu = self._dev(device)  # type: ignore[attr-defined]
        key = f"gpu{gpu.index}.mig_mode"
        reason = self.node.unknown_reasons.get(key, "")  # type: ignore[attr-defined]
        current, pending = gpu.mig_mode_current, gpu.mig_mode_pending
        if current is None or pending is None or reason.startswith(_NO_MIG_NOTE_START):
            raise NVMLError(self._unknown(key, C["NVML_ERROR_NOT_SUPPORTED"]))  # type: ignore[attr-defined]
        return [_MIG_CODES[current], _MIG_CODES[pending]]
