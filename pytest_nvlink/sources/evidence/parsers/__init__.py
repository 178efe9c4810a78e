"""Parsers for the text outputs of GPU tools, one module per tool, each ``parse(text)`` -> frozen result.

They are pure Python and know nothing of pytest, so the evidence loader, the measurement harness and
users' scripts can share them. Every one of them raises :class:`ParseError` (and nothing else) for
text it cannot read; :mod:`pytest_nvlink.sources.evidence.parsers.detect` tells the kinds apart by content.
"""

from __future__ import annotations

from pytest_nvlink.sources.evidence.parsers.common import ParseError

__all__ = ["ParseError"]
