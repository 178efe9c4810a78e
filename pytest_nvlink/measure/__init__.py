"""Live measurements: P2P copy bandwidth and collective bandwidth.

Nothing in this package imports torch at import time; the heavy work happens in spawned child
processes so that a hung CUDA call can be killed.
"""
