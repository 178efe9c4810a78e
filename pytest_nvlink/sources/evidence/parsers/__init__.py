"""Parsers for the text outputs of GPU tools, one module per tool, each ``parse(text)`` -> frozen result.

They are pure Python and know nothing of pytest, so the evidence loader, the measurement harness and
users' scripts can share them. Every one of them raises :class:`ParseError` (and nothing else) for
text it cannot read. Each module also registers its evidence format (:mod:`.registry`): how its
output is told apart by content, which evidence families it feeds and how it is merged;
:mod:`pytest_nvlink.sources.evidence.parsers.detect` walks those registrations.

Every parser module is imported here, so the registry is whole once any of them is imported. The
order is the order the "cannot tell which tool" message lists them in; detection has its own order.
"""

from __future__ import annotations

from pytest_nvlink.sources.evidence.parsers.common import ParseError

# The order is the message's (see above), so the imports are not sorted.
# isort: off
from pytest_nvlink.sources.evidence.parsers import topo, topo_p2p, nvlink, smi_query, nccl_tests  # noqa: F401
from pytest_nvlink.sources.evidence.parsers import p2p_latency, nvbandwidth, nccl_log, snapshot_json  # noqa: F401
from pytest_nvlink.sources.evidence.parsers import kernel_log, bandwidth_test, dcgm_diag  # noqa: F401

# isort: on

__all__ = ["ParseError"]
