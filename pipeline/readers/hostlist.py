"""Slurm hostlist expressions: ``gpu-[001-003,010],login1`` -> gpu-001, gpu-002, gpu-003, gpu-010, login1.

Grammar (Slurm ``scontrol show hostnames``): comma-separated items; an item is text with bracketed
range lists ``[a-b,c]``; zero padding follows the width of the lower bound; several bracket groups
in one item expand as their product (``r[1-2]n[1-2]`` -> r1n1, r1n2, r2n1, r2n2).

:func:`compress` is the inverse: host names -> the shortest usual expression (ranges on each
name's last number, zero padding kept), for ``scontrol update nodename=... state=drain``.

An expression may name at most :data:`MAX_HOSTS` hosts in all (checked before expanding), so a
hostile ``a[0-999999]b[0-999999]`` in a log is a rejected line, not a terabyte of names.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

import polars as pl

_ITEM = re.compile(r"(?:[^,\[\]]|\[[^\[\]]*\])+")
_RANGE = re.compile(r"(\d{1,18})(?:-(\d{1,18}))?")  # longer numbers are no host names (and int() refuses)
MAX_HOSTS = 1_000_000


class HostlistError(ValueError):
    pass


def _range_values(spec: str, expr: str) -> list[str]:
    values: list[str] = []
    for part in spec.split(","):
        m = _RANGE.fullmatch(part.strip())
        if not m:
            raise HostlistError(f"hostlist {expr!r}: bad range {part!r} (expected N or N-M)")
        low, high = m.group(1), m.group(2) or m.group(1)
        if int(high) < int(low) or len(values) + int(high) - int(low) >= MAX_HOSTS:
            raise HostlistError(f"hostlist {expr!r}: range {part!r} is empty or too large")
        width = len(low)
        values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return values


def expand(expr: str) -> list[str]:
    """All host names of a hostlist expression, in order; '' and 'None assigned' give []."""
    expr = expr.strip()
    if not expr or expr.lower() in {"none assigned", "none", "(null)"}:
        return []
    items = _ITEM.findall(expr)
    if ",".join(items) != expr:
        raise HostlistError(f"hostlist {expr!r}: unbalanced brackets or empty item")
    hosts: list[str] = []
    for item in items:
        pieces = re.split(r"\[([^\]]*)\]", item)  # text, range, text, range, ..., text
        choices = [[p] if i % 2 == 0 else _range_values(p, expr) for i, p in enumerate(pieces)]
        if len(hosts) + math.prod(len(c) for c in choices) > MAX_HOSTS:
            raise HostlistError(f"hostlist {expr[:80]!r}: names more than {MAX_HOSTS} hosts")
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts


_LAST_NUMBER = re.compile(r"(.*?)(\d{1,18})(\D*)")


def _parts(host: str) -> tuple[str, str, int, str]:
    """(prefix, suffix, number, digits) of a name's last number; (name, "", -1, "") without one."""
    if not host or any(c in host for c in ",[]") or host != host.strip():
        raise HostlistError(
            f"{host!r} cannot be named in a hostlist (empty, or has a comma, bracket or space)"
        )
    m = _LAST_NUMBER.fullmatch(host)
    return (m.group(1), m.group(3), int(m.group(2)), m.group(2)) if m else (host, "", -1, "")


def host_order(host: str) -> tuple[str, str, int, str]:
    """The order :func:`compress` lists hosts in: by the text around the last number, then by it."""
    return _parts(host)


def compress(hosts: Iterable[str]) -> str:
    """The hostlist expression of ``hosts``: ``gpu-001, gpu-002, gpu-003, gpu-010, login1`` ->
    ``gpu-[001-003,010],login1``. Duplicates are dropped and names are listed in
    :func:`host_order`, so ``expand(compress(x)) == sorted(set(x), key=host_order)``. A range
    continues only while ``str(n).zfill(width of its first number)`` gives the name back, which
    is how :func:`expand` reads it (``[8-10]`` is 8, 9, 10; ``[08-10]`` is 08, 09, 10)."""
    items: list[str] = []
    ordered = sorted({_parts(h) for h in hosts})
    for (prefix, suffix), group in itertools.groupby(ordered, key=lambda p: (p[0], p[1])):
        numbers = [(n, digits) for _, _, n, digits in group]
        if numbers[0][0] < 0:  # a name without a number
            items.append(prefix)
            continue
        ranges: list[list[str]] = []  # [first digits, last digits]
        previous = None
        for n, digits in numbers:
            if previous is not None and n == previous + 1 and str(n).zfill(len(ranges[-1][0])) == digits:
                ranges[-1][1] = digits
            else:
                ranges.append([digits, digits])
            previous = n
        if len(numbers) == 1:
            items.append(f"{prefix}{numbers[0][1]}{suffix}")
            continue
        spec = ",".join(low if low == high else f"{low}-{high}" for low, high in ranges)
        items.append(f"{prefix}[{spec}]{suffix}")
    return ",".join(items)


def expand_frame(values: pl.Series) -> pl.DataFrame:
    """Each distinct hostlist of ``values`` once: columns ``values.name`` (the expression),
    ``nodes`` (its hosts) and ``hostlist_error`` (why it cannot be expanded, else null). A log
    repeats a few hostlists many times, so expanding per distinct value is what keeps it cheap."""
    rows = []
    for value in values.drop_nulls().unique().to_list():
        try:
            rows.append((value, expand(value), None))
        except HostlistError as exc:
            rows.append((value, None, str(exc)))
    return pl.DataFrame(
        rows,
        schema={values.name: pl.String, "nodes": pl.List(pl.String), "hostlist_error": pl.String},
        orient="row",
    )
