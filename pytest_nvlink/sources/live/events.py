"""Listen for NVML's Xid events on every GPU while the run lasts, and record them into the node.

``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, set)`` per GPU and
``nvmlEventSetWait_v2(set, timeout_ms)`` in a thread, which raises ``NVMLError_Timeout`` when nothing came
within the timeout (nvidia-ml-py: "raises NVML_ERROR_TIMEOUT exception on timeout"), so the thread sees its
stop flag at least every timeout. ``c_nvmlEventData_t`` carries the device handle, the event type and the Xid
(``eventData``) but no time, so each event is stamped when the wait returns it.

Listening never raises: a GPU whose events cannot be registered (some VMs, MIG, older drivers) is left out of
the window with its reason in ``Node.unknown_reasons["gpu<i>.xid_events"]``, and its check is unknown.
"""

from __future__ import annotations

import ctypes
import threading
import time
import types
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from pytest_nvlink.model import CampaignSpan, EventWindow, Node, XidEvent
from pytest_nvlink.sources.live.fields import nvml_reason, started_nvml

WAIT_TIMEOUT_MS = 200  # how long one wait blocks: the longest the thread takes to notice it should stop
JOIN_TIMEOUT_S = 2.0  # a wait stuck in the driver must not hang the end of the session
SOURCE = "NVML Xid events"
Clock = Callable[[], float]


class XidListener:
    """``start()`` at the beginning of the run, ``stop()`` at its end; events go to ``node.xid_events``."""

    def __init__(
        self,
        node: Node,
        nvml: types.ModuleType | None = None,
        *,
        clock: Clock = time.time,
        timeout_ms: int = WAIT_TIMEOUT_MS,
    ) -> None:
        self.node = node
        self.clock = clock
        self.timeout_ms = timeout_ms
        self._nvml = nvml
        self._set: Any = None
        self._by_handle: dict[int | None, int] = {}  # handle address -> GPU index
        self._bus_ids: dict[int, str | None] = {}  # GPU index -> its PCI bus id, for the record
        self._started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._initialized = False

    # --- the run's start and end ---------------------------------------------------------------

    def start(self) -> None:
        self._started = self.clock()
        self.node.event_window = EventWindow(source=SOURCE, start=_utc(self._started), length_s=0.0)
        self.node.xid_events = []
        problem = self._open()
        if problem is not None:
            self._not_listening(problem)
            return
        for gpu in self.node.gpus:
            self._register(gpu.index, gpu.problem)
        if self._by_handle:
            self._thread = threading.Thread(target=self._listen, name="nvlink-xid-listener", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop listening and close the window; safe to call twice or without a start."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():  # still inside the driver's wait: the window ends here regardless
                self._cut(f"the NVML event wait did not return within {JOIN_TIMEOUT_S:g} s of the run's end")
        self._close()

    def campaign(self, name: str, started: float, ended: float) -> None:
        """Note a measurement campaign (host clock times), so that an event can be placed relative to it."""
        window = self.node.event_window
        if window is not None:
            window.campaigns.append(CampaignSpan(name, started - self._started, ended - self._started))

    # --- NVML ----------------------------------------------------------------------------------

    def _open(self) -> str | None:
        self._nvml, problem = started_nvml(self._nvml)
        if self._nvml is None or problem is not None:
            return problem
        nvml = self._nvml
        self._initialized = True
        try:
            self._set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            return f"the driver cannot create an NVML event set ({nvml_reason(exc)})"
        except AttributeError:
            return "this nvidia-ml-py has no nvmlEventSetCreate"
        return None

    def _register(self, index: int, problem: str | None) -> None:
        nvml = self._nvml
        assert nvml is not None
        key = f"gpu{index}.xid_events"
        if problem is not None:
            self.node.unknown_reasons[key] = f"GPU {index} is unusable ({problem}): no events registered"
            return
        xid_type = nvml.nvmlEventTypeXidCriticalError
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            if not _offers(nvml, handle, xid_type):
                self.node.unknown_reasons[key] = (
                    f"the driver offers no Xid events for GPU {index} (nvmlDeviceGetSupportedEventTypes lacks "
                    "nvmlEventTypeXidCriticalError; common in VMs and with MIG)"
                )
                return
            nvml.nvmlDeviceRegisterEvents(handle, xid_type, self._set)
        except nvml.NVMLError as exc:
            self.node.unknown_reasons[key] = (
                f"the driver refused to register Xid events for GPU {index} ({nvml_reason(exc)})"
            )
            return
        self._by_handle[_address(handle)] = index
        gpu = self.node.gpu(index)
        self._bus_ids[index] = gpu.pci_bus_id if gpu is not None else None
        assert self.node.event_window is not None
        self.node.event_window.gpus.append(index)

    def _listen(self) -> None:
        nvml = self._nvml
        assert nvml is not None
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, self.timeout_ms)
            except nvml.NVMLError_Timeout:
                self._tick()
                continue
            except nvml.NVMLError as exc:
                self._cut(f"NVML stopped delivering events ({nvml_reason(exc)})")
                return
            self._record(data)
            self._tick()

    def _record(self, data: Any) -> None:
        nvml = self._nvml
        assert nvml is not None
        if not int(data.eventType) & nvml.nvmlEventTypeXidCriticalError:
            return
        now = self.clock()
        gpu = self._by_handle.get(_address(data.device))
        xid = int(data.eventData)
        events = self.node.xid_events
        assert events is not None
        where = f"GPU {gpu}" if gpu is not None else "a device NVML did not name"
        at = max(now - self._started, 0.0)
        bus = self._bus_ids.get(gpu) if gpu is not None else None
        events.append(XidEvent(gpu, xid, at, f"NVML: Xid {xid} on {where}", pci_bus_id=bus, stamp=_utc(now)))

    def _tick(self) -> None:
        window = self.node.event_window
        if window is not None:
            window.length_s = max(self.clock() - self._started, 0.0)

    def _cut(self, why: str) -> None:
        """Listening ended early: the window no longer vouches for any GPU after this moment."""
        window = self.node.event_window
        if window is None:
            return
        at = max(self.clock() - self._started, 0.0)
        for index in window.gpus:
            self.node.unknown_reasons[f"gpu{index}.xid_events"] = f"{why} {at:.1f} s into the run"
        window.gpus = []

    def _not_listening(self, why: str) -> None:
        for gpu in self.node.gpus:
            self.node.unknown_reasons[f"gpu{gpu.index}.xid_events"] = f"no Xid events were listened for: {why}"

    def _close(self) -> None:
        self._tick()
        nvml = self._nvml
        if nvml is None or not self._initialized:
            return
        self._initialized = False
        try:
            if self._set is not None:
                nvml.nvmlEventSetFree(self._set)
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            return  # nothing left to release


def _offers(nvml: types.ModuleType, handle: Any, xid_type: int) -> bool:
    """Whether the GPU offers Xid events; a driver without the query is asked to register directly."""
    try:
        return bool(int(nvml.nvmlDeviceGetSupportedEventTypes(handle)) & xid_type)
    except nvml.NVMLError_FunctionNotFound:
        return True


def _address(handle: Any) -> int | None:
    """The device a handle points at: event data carries its own pointer object for the same device."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return id(handle)


def _utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
