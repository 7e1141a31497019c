"""Property-based tests over every parser: any bytes or lines give a result or a documented clean
error (never a crash), and every line is accounted for: read = ingested + duplicate + rejected +
ignored, the per-file counts match the warehouse, and ``read`` is the number of lines in the file.

A bounded number of examples runs by default; ``--run-slow`` runs many more (the ``long`` ids).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import config, warehouse
from pipeline.categories import FailureCategory
from pipeline.ingest import InputError, ReaderOptions, ingest_files
from pipeline.readers.bgl import read_bgl
from pipeline.readers.hostlist import MAX_HOSTS, HostlistError, expand
from pipeline.readers.lanl import read_lanl
from pipeline.readers.titan import read_titan

EXAMPLES = [
    pytest.param(25, id="bounded"),
    pytest.param(1500, id="long", marks=pytest.mark.slow),
]

HOSTILE = [
    "'; DROP TABLE incidents; --",
    "<script>alert(1)</script>",
    "\x1b[2J\x1b]0;pwned\x07",
    "\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\",
    "../../etc/passwd",
    "a\x00b",
    "\u202eevil",
    "\ufeff",
    "é😀",
]
# Text that can be written as UTF-8 (no lone surrogates); invalid UTF-8 comes from st.binary().
chars = st.characters(exclude_categories=("Cs",))
nasty = st.one_of(st.sampled_from(HOSTILE), st.text(alphabet=chars, max_size=30))
# A line without \n (the separator); \r stays inside it like in the readers.
line_text = st.one_of(
    nasty, st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\n"), max_size=60)
)


def run(examples: int, *strategies):
    """Decorate a check with ``given(*strategies)`` and run it ``examples`` times."""

    def wrap(check):
        return settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )(given(*strategies)(check))()

    return wrap


def physical_lines(data: bytes) -> int:
    """Lines as every reader counts them: split at \\n; a last line without \\n still counts."""
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


class Files:
    """A warehouse plus numbered files written into one folder, for many examples in one test."""

    def __init__(self, root: Path) -> None:
        self.root, self.numbers = root, itertools.count()
        self.con = warehouse.connect(root / "w.duckdb")

    def write(self, suffix: str, data: bytes) -> Path:
        path = self.root / f"f{next(self.numbers)}{suffix}"
        path.write_bytes(data)
        return path

    def ingest(self, path: Path, **options):
        """The file's summary after checking that its counts add up and match the warehouse. The
        generated files may be mostly bad lines on purpose: no share of rejects refuses them here
        (the limit has its own tests in test_ingest_canonical.py)."""
        try:
            [summary] = ingest_files(self.con, [path], ReaderOptions(max_rejected_percent=100, **options))
        except InputError as exc:
            assert str(path) in str(exc), exc  # the clean error names the file
            return None
        s = summary
        if s.skipped or s.file_id is None:
            return s
        assert s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected + s.rows_ignored, s
        assert min(s.rows_ingested, s.rows_duplicate, s.rows_rejected, s.rows_ignored) >= 0, s
        stored = {
            "incidents": "events",
            "xid_log": "events",
            "inventory": "inventory",
            "jobs": "jobs",
        }[s.kind]
        ingested = self.con.sql(
            f"SELECT count(*) FROM {stored} WHERE file_id = ?",  # noqa: S608 (a name from the dict above)
            params=[s.file_id],
        )
        rejected = self.con.sql("SELECT count(*) FROM rejects WHERE file_id = ?", params=[s.file_id])
        assert (ingested.fetchall()[0][0], rejected.fetchall()[0][0]) == (s.rows_ingested, s.rows_rejected)
        row = self.con.sql(
            "SELECT rows_read, rows_ingested, rows_duplicate, rows_rejected FROM ingested_files"
            " WHERE file_id = ?",
            params=[s.file_id],
        ).fetchall()
        assert row == [(s.rows_read, s.rows_ingested, s.rows_duplicate, s.rows_rejected)]
        return s


@pytest.fixture
def files(tmp_path):
    f = Files(tmp_path)
    yield f
    f.con.close()


# --- kernel logs (XID) ---------------------------------------------------------------------------
stamp = st.sampled_from(
    [
        "2026-03-02T04:26:29.892511+00:00",
        "2026-03-02 04:26:29",
        "2016-12-31T23:59:60Z",
        "1969-12-31T23:59:59Z",
        "2999-01-01T00:00:00+14:00",
        "Mar  2 04:26:29",
        "Feb 30 04:26:29",
        "Dec 31 23:59:60",
        "[Mon Mar  2 04:26:29 2026]",
        "[ 361589.124297]",
        "9999-99-99T99:99:99",
    ]
)
xid_line = st.builds(
    lambda ts, host, code, bus, tail: f"{ts} {host} kernel: NVRM: Xid (PCI:0000:{bus}:00): {code}, {tail}",
    stamp,
    st.one_of(st.sampled_from(["node-1", "n2"]), nasty.filter(lambda h: h.strip() and "\n" not in h)),
    st.one_of(st.integers(0, 200).map(str), st.sampled_from(["", "-1", "99999999999999999999", "x"])),
    st.sampled_from(["18", "2a", "ZZ"]),
    line_text,
)
kernel_lines = st.lists(st.one_of(xid_line, line_text), max_size=12)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_kernel_log_lines_are_all_accounted_for(files, examples):
    @run(examples, kernel_lines, st.sampled_from(["\n", "\r\n"]), st.booleans())
    def check(lines, newline, final_newline):
        data = (newline.join(lines) + (newline if final_newline and lines else "")).encode()
        s = files.ingest(files.write(".log", data), fmt="kernel-log", node="dmesg-node", year=2026)
        if s is not None and not s.skipped and s.file_id is not None:
            assert s.rows_read == physical_lines(data)


@pytest.mark.parametrize("examples", EXAMPLES)
@pytest.mark.parametrize("fmt", ["kernel-log", "sacct", "csv", "jsonl"])
def test_arbitrary_bytes_give_a_summary_or_a_clean_error(files, examples, fmt):
    @run(examples, st.binary(max_size=300))
    def check(data):
        files.ingest(files.write(".bin", data), fmt=fmt)


# --- sacct ---------------------------------------------------------------------------------------
hostlists = st.one_of(
    st.sampled_from(["gpu-[001-004]", "a[1-2]b[1-3]", "x[0-999999]y[0-999999]", "n[5-1]", "g[1-", ""]),
    nasty,
)
sacct_row = st.builds(
    lambda job, state, start, end, nodes, extra: "|".join([job, state, start, end, nodes, *extra]),
    st.one_of(st.integers(1, 50).map(str), st.sampled_from(["7.batch", "7.0", ""]), nasty),
    st.sampled_from(["COMPLETED", "NODE_FAIL", "CANCELLED by 5", "", "<b>x</b>"]),
    st.sampled_from(["2024-03-01T10:00:00", "1709287200", "Unknown", "bad", "2016-12-31T23:59:60"]),
    st.sampled_from(["2024-03-01T11:00:00", "1709290800", "None", "1969-01-01T00:00:00", ""]),
    hostlists,
    st.lists(line_text, max_size=2),
)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_sacct_lines_are_all_accounted_for(files, examples):
    @run(examples, st.lists(st.one_of(sacct_row, line_text), max_size=10), st.booleans())
    def check(rows, trailing_pipe):
        header = "JobID|State|Start|End|NodeList" + ("|" if trailing_pipe else "")
        data = ("\n".join([header, *rows]) + "\n").encode()
        s = files.ingest(files.write(".txt", data), fmt="sacct", cluster="c1")
        assert s is not None, "a file with a header must not be refused as a whole"
        if not s.skipped:
            assert s.rows_read == physical_lines(data)


# --- canonical CSV / JSONL -----------------------------------------------------------------------
incident_field = {
    "timestamp": st.sampled_from(
        ["2026-03-02T04:26:29Z", "2026-03-02 04:26:29", "1969-07-20T20:17:40Z", "2999-01-01T00:00:00Z"]
        + ["2016-12-31T23:59:60Z", "", "not-a-time", "2026-02-30T00:00:00Z"]
    ),
    "cluster_id": st.one_of(st.sampled_from(["c1", ""]), nasty),
    "node_id": st.one_of(st.sampled_from(["n1", ""]), nasty),
    "category": st.one_of(st.sampled_from([c.value for c in FailureCategory]), nasty),
    "gpu_index": st.sampled_from(["", "0", "7", "-1", "x", "99999999999"]),
    "message": nasty,
}
incident_rows = st.lists(st.fixed_dictionaries(incident_field), max_size=10)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_canonical_csv_rows_are_all_accounted_for(files, examples):
    @run(examples, incident_rows)
    def check(rows):
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(incident_field), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        s = files.ingest(files.write(".csv", text.getvalue().encode()))
        assert s is not None, "a well-formed CSV with the right header must not be refused"
        assert s.skipped or s.rows_read == len(rows)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_canonical_jsonl_rows_are_all_accounted_for(files, examples):
    @run(examples, incident_rows)
    def check(rows):
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        s = files.ingest(files.write(".jsonl", data))
        if rows:
            assert s is not None, "well-formed JSONL with the canonical keys must not be refused"
            assert s.skipped or s.rows_read == len(rows)


# --- hostlists -----------------------------------------------------------------------------------
@pytest.mark.parametrize("examples", EXAMPLES)
def test_hostlist_expands_or_raises_hostlist_error(examples):
    alphabet = st.sampled_from(list("ab-,[]019 ") + ["999999", "1000000", "9" * 5000])

    @run(
        examples,
        st.one_of(st.text(alphabet=chars, max_size=40), st.lists(alphabet, max_size=25).map("".join)),
    )
    def check(expr):
        try:
            hosts = expand(expr)
        except HostlistError:
            return
        assert len(hosts) <= MAX_HOSTS


@pytest.mark.parametrize(
    "expr",
    ["x[0-999999]y[0-999999]", "a[1-999999],b[1-999999]", "n[" + ",".join(["0-999999"] * 3) + "]"],
)
def test_hostlists_naming_too_many_hosts_are_refused_before_expanding(expr):
    with pytest.raises(HostlistError, match="more than|too large"):
        expand(expr)


# --- config loader -------------------------------------------------------------------------------
toml_piece = st.sampled_from(
    [
        "[inputs]",
        "[retention]",
        "[recovery.x]",
        "[[jobs]]",
        'csv = ["*.csv"]',
        'csv = "x"',
        'roots = ["."]',
        "allow_outside_roots = 1",
        "allow_outside_roots = true",
        'timezone = "../../etc/passwd"',
        'timezone = ""',
        'timezone = "Europe/Paris"',
        "keep_reports = 0",
        "keep_days = -1",
        "max_decompressed_mb = 0",
        "dedup_window_minutes = nan",
        "dedup_window_minutes = -inf",
        "observed_until = 2026-01-01",
        "observed_until = 12:00:00",
        'observed_until = "yesterday"',
        'jobs = ["../../etc/passwd"]',
        "jobs = [1]",
        "detect_hours = -1",
        "x = { y = 1 }",
        "= 1",
    ]
)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_config_loader_returns_a_config_or_a_config_error(tmp_path, examples):
    path = tmp_path / "failcast.toml"

    @run(examples, st.lists(st.one_of(toml_piece, st.text(alphabet=chars, max_size=20)), max_size=8))
    def check(pieces):
        path.write_text("\n".join(pieces), encoding="utf-8")
        try:
            config.load_config(path)
        except config.ConfigError as exc:
            assert str(path) in str(exc)


# --- public data: BGL ----------------------------------------------------------------------------
bgl_line = st.one_of(
    st.builds(
        lambda tag, epoch, node, msg: (
            f"{tag} {epoch} 2005.06.03 {node} 2005-06-03-15.42.50.363779 {node} RAS KERNEL FATAL {msg}"
        ),
        st.sampled_from(["-", "KERNDTLB", "APPSEV", "NEWTAG", ""]),
        st.sampled_from(
            ["1117838570", "-5", "x", "1e9"]
        ),  # bad epochs: see test_read_bgl_rejects_epochs_that_are_no_epoch
        st.one_of(st.sampled_from(["R02-M1-N0-C:J12-U11", "NULL", "UNKNOWN_LOCATION"]), nasty),
        line_text,
    ),
    line_text,
)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_read_bgl_accounts_for_every_line(files, examples):
    @run(examples, st.lists(bgl_line.map(lambda s: s.replace("\r", " ")), max_size=10))
    def check(lines):
        data = "".join(line + "\n" for line in lines).encode()
        frames = read_bgl(files.write(".log", data))
        counts = frames.extras["lines"].row(0, named=True)
        assert counts["lines"] == physical_lines(data)
        assert counts["lines"] == counts["non_alert"] + counts["incidents"] + counts["rejects"]
        assert frames.incidents.height == counts["incidents"]


@pytest.mark.parametrize("epoch", ["1" * 40, "\u00b2"])
def test_read_bgl_rejects_epochs_that_are_no_epoch(tmp_path, epoch):
    path = tmp_path / "bgl.log"
    path.write_text(
        f"KERNDTLB {epoch} 2005.06.03 R02-M1-N0 2005-06-03-15.42.50 R02-M1-N0 RAS KERNEL FATAL x\n"
    )
    frames = read_bgl(path)
    assert frames.extras["rejects"].height == 1


@pytest.mark.parametrize("reader", [read_lanl, read_titan])
def test_public_csv_readers_raise_only_value_errors(tmp_path, reader):
    path = tmp_path / "data.csv"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="data.csv"):
        reader(path)
