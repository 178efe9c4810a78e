"""pytest-nvlink: acceptance tests for NVLink, P2P and collective bandwidth on multi-GPU servers."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
