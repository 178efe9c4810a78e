"""``pytest-nvlink fleet``: merge per-node ``--nvlink-json`` results into one fleet verdict.

Nothing here imports pytest; the command line is :mod:`pytest_nvlink.cli`.
"""
