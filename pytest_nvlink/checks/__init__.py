"""Shipped acceptance checks, collected when ``--nvlink-suite`` is given without paths."""
