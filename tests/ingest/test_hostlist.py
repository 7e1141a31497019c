"""Slurm hostlist compression: table tests and the round trip expand(compress(x)) == x."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.readers.hostlist import HostlistError, compress, expand, host_order


@pytest.mark.parametrize(
    ("hosts", "expr"),
    [
        (["gpu-001", "gpu-002", "gpu-003", "gpu-010", "login1"], "gpu-[001-003,010],login1"),
        (["n8", "n9", "n10"], "n[8-10]"),  # unpadded ranges cross a digit count
        (["n098", "n099", "n100"], "n[098-100]"),
        (["n1", "n08", "n09", "n10"], "n[1,08-10]"),  # padded and unpadded: both names survive
        (["r1n1", "r1n2", "r2n1"], "r1n[1-2],r2n1"),  # ranges on the last number
        (["c0512-n0136"], "c0512-n0136"),
        (["node7.ib", "node8.ib"], "node[7-8].ib"),
        (["login", "gpu-1"], "gpu-1,login"),
        ([], ""),
    ],
)
def test_compress_table(hosts, expr):
    assert compress(hosts) == expr
    assert expand(expr) == sorted(hosts, key=host_order)


def test_compress_drops_duplicates_and_orders():
    assert compress(["a3", "a1", "a2", "a1"]) == "a[1-3]"


@pytest.mark.parametrize("bad", ["", "a,b", "a[1]", " a"])
def test_names_a_hostlist_cannot_hold_are_refused(bad):
    with pytest.raises(HostlistError):
        compress([bad])


names = st.builds(
    lambda prefix, n, width, suffix: f"{prefix}{str(n).zfill(width)}{suffix}",
    st.sampled_from(["gpu-", "n", "r1n", "a-b", "x"]),
    st.integers(0, 1200),
    st.integers(1, 4),
    st.sampled_from(["", ".ib", "-eth"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(names | st.sampled_from(["login", "head"]), max_size=40))
def test_expand_compress_round_trip(hosts):
    assert expand(compress(hosts)) == sorted(set(hosts), key=host_order)
