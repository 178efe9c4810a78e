"""How many ranks an nccl-tests run had, and on how many hosts, from every place its output says so.

People paste the ``# Using devices`` list cut down to a few ranks (``Rank 0``, ``Rank 7``, ``Rank 8``,
``Rank 15``), so its length is not the rank count: when ranks are missing from it the count is the
highest rank + 1, cross-checked with what else the text states: ``nranks N`` of NCCL's Init/Destroy
lines, ``SLURM_NTASKS`` times the ranks per process (``nThread`` x ``nGpus`` of the header) and the
busbw/algbw factor of the collective (nccl-tests doc/PERFORMANCE.md). Sources that disagree leave the
count unknown: a person could not tell either.

A run whose ranks sit on several hosts (host names in the device list, ``nNodes N`` of NCCL's lines,
``srun -N N``) is a multi-node figure; NCCL's own ``nNodes`` wins over host names, which differ for
ranks in separate containers of one server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# busbw / algbw for each collective at n ranks (nccl-tests doc/PERFORMANCE.md).
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}
# A line of the device list a person shortened: "...", "# ...", "[...]", "<snip>", "(output truncated)".
ELISION = re.compile(r"#?\s*(?:\.{2,}|…|⋮|\[\s*\.{2,}\s*\]|<\s*snip\s*>|\(?\s*(?:output\s+)?truncated\s*\)?)\s*", re.I)
_SLURM_NTASKS = re.compile(r"\bSLURM_NTASKS\s*[=:]\s*(\d+)")
_NNODES = re.compile(r"\bnNodes\s+(\d+)")
_SRUN_NODES = re.compile(r"\bsrun\b.*?(?:\s-N\s*|\s--nodes[=\s])(\d+)\b")
_LOG_HOST = re.compile(r"(?<![^\s:\[\]])([^\s:\[\]]+):\d+:\d+\s+\[\d+\]\s+(?:\S+\s+)?NCCL\s+(?:INFO|WARN)")


class _Row(Protocol):
    @property
    def out_of_place(self) -> _Timing: ...


class _Device(Protocol):
    @property
    def rank(self) -> int: ...

    @property
    def device(self) -> int: ...

    @property
    def bus(self) -> str: ...


class _Timing(Protocol):
    @property
    def algbw_gbps(self) -> float | None: ...

    @property
    def busbw_gbps(self) -> float | None: ...


@dataclass(frozen=True)
class RankFacts:
    """The rank count (None when unknown), how it was found, and the hosts and nodes the run names."""

    nranks: int | None
    how: tuple[str, ...] = ()
    conflict: str | None = None  # why the count is unknown although the text names ranks
    elided: bool = False  # the device list leaves ranks out
    nodes: int | None = None  # NCCL's nNodes (or srun -N) when stated
    log_hosts: tuple[str, ...] = field(default_factory=tuple)


def rank_facts(
    text: str,
    listed: Sequence[int],
    per_process: int | None,
    log_nranks: int | None,
    *,
    marker: bool,
) -> RankFacts:
    """``listed``: the ranks of the device lines; ``marker``: an elision line inside the device list."""
    ranks = sorted(set(listed))
    elided = bool(ranks) and (marker or ranks != list(range(len(ranks))))
    stated: list[tuple[int, str]] = []
    if log_nranks is not None:
        stated.append((log_nranks, f"{log_nranks} ranks from NCCL's 'nranks {log_nranks}' lines"))
    ntasks = [int(n) for n in _SLURM_NTASKS.findall(text)]
    if ntasks and per_process:
        tasks = max(ntasks)
        stated.append((tasks * per_process, f"{tasks * per_process} ranks from SLURM_NTASKS={tasks} x {per_process}"))
    nodes = _nodes(text)
    hosts = tuple(dict.fromkeys(_LOG_HOST.findall(text)))
    counts = sorted({n for n, _ in stated})
    if len(counts) > 1:
        return RankFacts(None, (), " but ".join(how for _, how in stated), elided, nodes, hosts)
    if ranks and not elided:
        if counts and counts[0] != len(ranks):
            why = f"the device list names ranks 0-{len(ranks) - 1} but {stated[0][1]}"
            return RankFacts(None, (), why, elided, nodes, hosts)
        return RankFacts(len(ranks), (), None, elided, nodes, hosts)
    if ranks:  # elided: the highest rank is a floor
        floor = ranks[-1] + 1
        if counts and counts[0] < floor:
            why = f"the device list names rank {ranks[-1]} but {stated[0][1]}"
            return RankFacts(None, (), why, elided, nodes, hosts)
        if counts:
            return RankFacts(counts[0], (stated[0][1] + " (the device list is elided)",), None, elided, nodes, hosts)
        how = f"{floor} ranks from the highest rank listed ({ranks[-1]}); the device list is elided"
        return RankFacts(floor, (how,), None, elided, nodes, hosts)
    if counts:
        return RankFacts(counts[0], (stated[0][1],), None, elided, nodes, hosts)
    return RankFacts(per_process, (), None, elided, nodes, hosts)


def _nodes(text: str) -> int | None:
    found = [int(n) for n in _NNODES.findall(text)] or [int(n) for n in _SRUN_NODES.findall(text)]
    return max(found) if found else None


def scope_text(nranks: int | None, hosts: Sequence[str], nodes: int | None) -> str:
    """'16 ranks on 2 hosts (a, b)' as far as the text says."""
    named = f" ({', '.join(hosts)})" if hosts else ""
    return f"{nranks} ranks on {nodes if nodes is not None else len(hosts)} hosts{named}"


def scope_conditions(multi_node: bool, hosts: Sequence[str], nodes: int | None) -> dict[str, str] | None:
    """A multi-node run's hosts as measurement conditions: judges tell it from a figure of one server by them."""
    if not multi_node:
        return None
    count = nodes if nodes is not None else len(hosts)
    return {"nodes": str(count), **({"hosts": ", ".join(hosts)} if hosts else {})}


def ratio_conflict(op: str, rows: Sequence[_Row], nranks: int) -> str | None:
    """Why the busbw/algbw factor of ``op`` does not fit ``nranks``; None when it fits or says nothing."""
    ratio = median_ratio(rows)
    if ratio is None or op not in BUS_FACTORS or op == "sendrecv" or nranks < 2:
        return None
    if ranks_fitting(op, ratio, nranks) is not None:
        return None
    solved = ranks_fitting(op, ratio, None)
    fits = f"fits {solved} ranks" if solved else "fits no rank count"
    return f"{nranks} ranks read from the text, but the busbw/algbw ratio {ratio:.3f} of {op} {fits}"


def ranks_from_ratio(op: str, rows: Sequence[_Row], how: list[str]) -> int | None:
    """The rank count the busbw/algbw factor of ``op`` solves to, with how in ``how``; None if none."""
    ratio = median_ratio(rows)
    if op not in BUS_FACTORS or op == "sendrecv" or ratio is None:
        return None
    ranks = ranks_fitting(op, ratio, None)
    if ranks:
        how.append(f"{ranks} ranks from the busbw/algbw ratio {ratio:.3f} of {op}")
    return ranks or None


def median_ratio(rows: Sequence[_Row]) -> float | None:
    ratios = sorted(
        busbw / algbw
        for r in rows
        if (algbw := r.out_of_place.algbw_gbps) and (busbw := r.out_of_place.busbw_gbps) is not None and algbw >= 1.0
    )
    return ratios[len(ratios) // 2] if ratios else None


def ranks_fitting(op: str, ratio: float, nranks: int | None) -> int | None:
    """The rank count (given, or solved from the ratio) at which ``op`` prints this ratio; None if none."""
    factor = BUS_FACTORS[op]
    if nranks is not None:
        return nranks if nranks >= 2 and abs(factor(nranks) - ratio) <= 0.03 * ratio else None
    if op == "sendrecv":
        return 0 if abs(ratio - 1.0) <= 0.03 else None
    # all_reduce: r = 2(n-1)/n, so n = 2/(2-r); the (n-1)/n family: n = 1/(1-r).
    scale = 2.0 if op == "all_reduce" else 1.0
    if ratio >= scale * 0.995:
        return None
    solved = round(scale / (scale - ratio))
    return solved if solved >= 2 and abs(factor(solved) - ratio) <= 0.01 * ratio else None


def rank_gpus(
    devices: Sequence[_Device], hosts: Sequence[str], nranks: int | None, *, multi_node: bool
) -> list[int] | None:
    """The device of each rank from '# Using devices' lines of a one-host run, when every rank is listed.

    Devices are CUDA numbers, taken as nvidia-smi's order like every CUDA-numbered evidence file.
    """
    ranks = sorted(devices, key=lambda d: d.rank)
    if len(hosts) != 1 or multi_node or [d.rank for d in ranks] != list(range(nranks or 0)):
        return None
    numbers = [d.device for d in ranks]
    buses = {d.bus.lower() for d in ranks}
    if len(set(numbers)) < len(numbers) and len(buses) == len(ranks):
        # One process per rank, each with its own CUDA_VISIBLE_DEVICES (Slurm --gpus-per-task=1), numbers
        # every GPU 0: distinct bus ids say the ranks ran on distinct GPUs, but not which node GPU each was,
        # so only the rank count is judged.
        return None
    return numbers
