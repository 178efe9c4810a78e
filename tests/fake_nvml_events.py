"""The fake ``pynvml``'s events: event sets, registration per GPU, and a wait that times out like NVML's.

Kept apart from :mod:`fake_nvml_state` (which mixes it into ``FakeNvml``) so that each file stays small.
It mirrors nvidia-ml-py where a caller can tell: ``nvmlEventSetCreate`` returns a ``c_nvmlEventSet_t``,
``nvmlEventSetWait_v2`` returns a ``c_nvmlEventData_t`` whose ``device`` points at the same device as the
handle registered, and raises ``NVMLError_Timeout`` when nothing arrived within the timeout; registering
a type the GPU does not offer raises ``NVMLError_NotSupported``.

Events are queued per GPU (``queue_xid``) and delivered, in order, to the sets that GPU is registered in.
"""

from __future__ import annotations

import ctypes
import threading
from collections import deque
from typing import Any

from fake_nvml_api import C, NVMLError, c_nvmlEventData_t, c_nvmlEventSet_t, struct_c_nvmlEventSet_t

XID_TYPE = C["nvmlEventTypeXidCriticalError"]
_INSTANCE_UNSET = 0xFFFFFFFF  # NVML's "not a MIG instance" in gpuInstanceId/computeInstanceId


class EventsMixin:
    """The event functions of ``FakeNvml``; it provides ``_dev``, ``_handles`` and ``gpus``."""

    def _init_events(self, *, no_xid_events: set[int]) -> None:
        self.no_xid_events = set(no_xid_events)  # node GPU indices whose driver offers no Xid events
        self.event_queues: dict[int, deque[tuple[int, int]]] = {}  # node GPU index -> (event type, data)
        self.event_sets: dict[int, dict[int, int]] = {}  # set address -> handle position -> types registered
        self._set_structs: dict[int, Any] = {}  # keeps each set's struct alive while the set is
        self._event_arrived = threading.Condition()

    # --- test controls ----------------------------------------------------------------------

    def queue_xid(self, gpu: int, xid: int) -> None:
        """An Xid on node GPU ``gpu``: delivered to the next wait of a set that GPU is registered in."""
        with self._event_arrived:
            self.event_queues.setdefault(gpu, deque()).append((XID_TYPE, xid))
            self._event_arrived.notify_all()

    # --- the functions ------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        struct = struct_c_nvmlEventSet_t()
        pointer = c_nvmlEventSet_t(struct)
        address = ctypes.addressof(struct)
        self._set_structs[address] = struct
        self.event_sets[address] = {}
        return pointer

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        gpu = self._dev(handle)  # type: ignore[attr-defined]
        offered = int(C["nvmlEventTypeAll"])
        return offered & ~XID_TYPE if gpu.index in self.no_xid_events else offered

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        self._dev(handle)  # type: ignore[attr-defined]  # a foreign handle raises as the ctypes call would
        registered = self._set_of(eventSet)
        if eventTypes & ~self.nvmlDeviceGetSupportedEventTypes(handle):
            raise NVMLError(C["NVML_ERROR_NOT_SUPPORTED"])
        position = handle._position
        registered[position] = registered.get(position, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> c_nvmlEventData_t:
        registered = self._set_of(eventSet)
        with self._event_arrived:
            found = self._next_event(registered)
            if found is None:
                self._event_arrived.wait(timeoutms / 1000)
                found = self._next_event(registered)
        if found is None:
            raise NVMLError(C["NVML_ERROR_TIMEOUT"])
        position, event_type, data = found
        event = c_nvmlEventData_t()
        event.device = self._handles[position]._as_parameter_  # type: ignore[attr-defined]
        event.eventType, event.eventData = event_type, data
        event.gpuInstanceId = event.computeInstanceId = _INSTANCE_UNSET
        return event

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> c_nvmlEventData_t:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        address = self._address_of(eventSet)
        self.event_sets.pop(address, None)
        self._set_structs.pop(address, None)

    # --- plumbing -----------------------------------------------------------------------------

    def _next_event(self, registered: dict[int, int]) -> tuple[int, int, int] | None:
        for position, types in registered.items():
            queue = self.event_queues.get(self.gpus[position].index)  # type: ignore[attr-defined]
            while queue:
                event_type, data = queue.popleft()
                if event_type & types:
                    return position, event_type, data
        return None

    def _set_of(self, eventSet: Any) -> dict[int, int]:
        registered = self.event_sets.get(self._address_of(eventSet))
        if registered is None:
            raise NVMLError(C["NVML_ERROR_INVALID_ARGUMENT"])  # freed, or never created by nvmlEventSetCreate
        return registered

    @staticmethod
    def _address_of(eventSet: Any) -> int:
        if not isinstance(eventSet, c_nvmlEventSet_t):
            raise ctypes.ArgumentError("argument 1: TypeError: wrong type")
        return ctypes.cast(eventSet, ctypes.c_void_p).value or 0
