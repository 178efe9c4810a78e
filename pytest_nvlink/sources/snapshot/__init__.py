"""A replayed node: snapshot files written by ``--nvlink-save``."""
