"""Verdicts: node facts and measurements judged against the suite and the SKU's thresholds.

Data flows one way: probe → model → judges → results record → renderers. A judge reads a
:class:`~pytest_nvlink.judges.context.Context` (node, suite, thresholds) and never knows which
source (live NVML, a replayed snapshot, parsed evidence) produced it. Each function judges one
GPU, pair, tray or operation and returns a :class:`~pytest_nvlink.verdict.Verdict` whose message
is one sentence: what was seen, what was expected and from which file and key, and the likely cause.

One module per area, mirroring ``pytest_nvlink/checks/test_<area>.py``:

- ``context``: :class:`Context` and the helpers every area shares (pair/GPU properties, per-GPU
  resolution, missing GPU and missing threshold verdicts).
- ``inventory``, ``nvlink``, ``topology``, ``platform``, ``bandwidth``, ``collectives``,
  ``baseline``, ``rack``: the judges the checks of that area call.
- ``errors``: NVLink error counters of one GPU (for ``nvlink``).
- ``xid``: the Xid events of one GPU during the run (live NVML events or a kernel log of the window).
- ``groups``: one verdict for all pairs of one source GPU, from the per-pair verdicts.
"""
