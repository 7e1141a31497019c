"""How canonical incidents are stored (pipeline/store/canonical_events.py): a later export that
closes an open ticket, the content key whatever the session's time zone, and the one-time
migration of keys stored while the key still carried the zone's offset."""

from __future__ import annotations

import pytest

from pipeline import rebuild, warehouse
from pipeline.categories import CategoryMap
from pipeline.ingest import ReaderOptions, ingest_files
from pipeline.readers.canonical import BATCH_ROWS, ingest_canonical
from pipeline.store import canonical_events as canonical_store

TICKETS = "timestamp,cluster_id,node_id,category,resolved_at\n"
OPEN = "2026-03-02T04:26:29Z,c1,n1,Xid 79,\n"
CLOSED = "2026-03-02T04:26:29Z,c1,n1,Xid 79,2026-03-02T08:00:00Z\n"
REOPENED = "2026-03-02T04:26:29Z,c1,n1,Xid 79,2026-03-02T09:00:00Z\n"  # another closing time
OTHER = "2026-03-05T04:26:29Z,c1,n2,Xid 79,\n"
CLOSES_ONE = "1 stored open incident(s) closed by this file's resolved_at"
ANOTHER_TIME = "1 row(s) give another resolved_at for an incident already closed"
MAP = CategoryMap()


# (rows of each export, hour n1's ticket is resolved at, (read, ingested, duplicate) and notes per export)
@pytest.mark.parametrize(
    ("exports", "resolved", "counts", "notes"),
    [
        pytest.param([OPEN, CLOSED + OTHER], 8, [(1, 1, 0), (2, 2, 0)], [[], [CLOSES_ONE]], id="closed"),
        pytest.param([CLOSED, OPEN], 8, [(1, 1, 0), (1, 0, 1)], [[], []], id="older-export-after"),
        pytest.param([OPEN, OPEN + OTHER], None, [(1, 1, 0), (2, 1, 1)], [[], []], id="still-open"),
        pytest.param(
            [OPEN, CLOSED, REOPENED],
            8,
            [(1, 1, 0), (1, 1, 0), (1, 0, 1)],
            [[], [CLOSES_ONE], [ANOTHER_TIME]],
            id="another-time-later",
        ),
        pytest.param([OPEN + CLOSED], 8, [(2, 2, 0)], [[CLOSES_ONE]], id="one-file"),
        pytest.param(
            [OPEN + REOPENED + CLOSED], 9, [(3, 2, 1)], [[CLOSES_ONE, ANOTHER_TIME]], id="one-file-first-line"
        ),
    ],
)
@pytest.mark.parametrize("batch_rows", [1, BATCH_ROWS])
def test_a_later_export_closes_the_open_ticket_it_repeats(
    tmp_path, exports, resolved, counts, notes, batch_rows
):
    """Tickets are exported while open and again once resolved: the later row is the same event
    (duplicate by key) yet its resolved_at closes the stored one, in events and in the incident the
    incremental rebuild keeps; a stored closing time is never changed, and the accounting adds up."""
    con = warehouse.connect(tmp_path / "w.duckdb")
    for i, rows in enumerate(exports):
        path = tmp_path / f"export{i}.csv"
        path.write_text(TICKETS + rows)
        with warehouse.transaction(con):
            s = ingest_canonical(con, path, sha=path.name, fmt="csv", batch_rows=batch_rows, category_map=MAP)
            rebuild.rebuild_incidents(con)
        assert (s.rows_read, s.rows_ingested, s.rows_duplicate) == counts[i]
        assert s.rows_read == s.rows_ingested + s.rows_duplicate + s.rows_rejected
        assert [n.split(":")[0] for n in s.notes if "resolved_at" in n] == [n.split(":")[0] for n in notes[i]]
    want = None if resolved is None else f"2026-03-02 0{resolved}:00:00"
    query = "SELECT CAST(resolved_at_utc AS VARCHAR) FROM {} WHERE node_id = 'n1'"
    assert con.sql(query.format("events")).fetchall() == [(want,)]
    assert con.sql(query.format("incidents")).fetchall() == [(want,)]
    incremental = con.sql("SELECT * FROM incidents ORDER BY ALL").fetchall()
    with warehouse.transaction(con):
        rebuild.rebuild_incidents(con, full=True)
    assert con.sql("SELECT * FROM incidents ORDER BY ALL").fetchall() == incremental
    con.close()


BERLIN = ReaderOptions(timezone="Europe/Berlin")
ROW = "2026-03-02T04:26:29.25Z,c1,n1,Xid 79,\n"


@pytest.mark.parametrize(
    ("first", "again", "options"),
    [
        pytest.param(ROW, ROW, [None, BERLIN], id="same-text-utc-then-berlin"),
        pytest.param(ROW, ROW, [BERLIN, None], id="same-text-berlin-then-utc"),
        pytest.param(ROW, ROW.replace("T04:26:29.25Z", " 05:26:29.25"), [None, BERLIN], id="naive-in-berlin"),
        pytest.param(ROW, "1772425589.25" + ROW[23:], [BERLIN, None], id="epoch-seconds"),
    ],
)
def test_the_key_of_a_row_does_not_depend_on_the_time_zone_it_was_read_in(con, write, first, again, options):
    """The same instant written either way is one event, whatever --timezone each ingest ran with
    (the key was the text of a TIMESTAMPTZ, which carries the session's offset: stored twice)."""
    [a] = ingest_files(con, [write("a.csv", TICKETS + first)], options[0])
    [b] = ingest_files(con, [write("b.csv", TICKETS + again + OTHER)], options[1])
    assert (a.rows_ingested, b.rows_ingested, b.rows_duplicate, b.rows_rejected) == (1, 1, 1, 0)
    assert con.sql("SELECT count(*) FROM events").fetchall() == [(2,)]


# The key the content key was under a session time zone: the text of the TIMESTAMPTZ in that zone.
_OLD_KEY = """md5(concat_ws(chr(31), CAST(timezone('UTC', timestamp_utc) AS VARCHAR), cluster_id, node_id,
                  lower(category), CAST(gpu_index AS VARCHAR), coalesce(message, '')))"""


def _snapshot(con) -> dict[str, list[tuple]]:
    queries = {
        "events": "SELECT * EXCLUDE (file_id) FROM events",
        "incidents": "SELECT * FROM incidents",
        "files": "SELECT path, rows_read, rows_ingested, rows_duplicate, rows_rejected FROM ingested_files",
    }
    return {name: con.sql(query + " ORDER BY ALL").fetchall() for name, query in queries.items()}


def test_keys_stored_under_another_zone_are_redone_once_and_their_copies_merged(tmp_path, write):
    """A warehouse as the old key left it: an export ingested under UTC, then a later one (the
    ticket now resolved, one more) under Europe/Berlin, whose rows got Berlin-offset keys, so the
    ticket was stored twice. The first ingest after the change redoes the keys once, merges the
    copy into the first event (its end closes it, as a later export closes an open ticket now) and
    moves nothing else: the warehouse is the one today's code builds from the same exports, counts
    included, and a third export of the same rows is all duplicate."""
    files = [write("a.csv", TICKETS + OPEN), write("b.csv", TICKETS + CLOSED + OTHER)]
    third = write("c.csv", TICKETS + OTHER + CLOSED)
    clean = warehouse.connect(tmp_path / "clean.duckdb")
    ingest_files(clean, files[:1])
    ingest_files(clean, files[1:], BERLIN)
    ingest_files(clean, [third], BERLIN)
    want = _snapshot(clean)

    con = warehouse.connect(tmp_path / "old.duckdb")
    ingest_files(con, files[:1])
    ingest_files(con, files[1:], BERLIN)
    with warehouse.transaction(con):  # what the old key stored for b.csv
        con.execute("SET TimeZone = 'Europe/Berlin'")
        con.execute(
            "INSERT INTO events SELECT * REPLACE (2 AS file_id, 2 AS line, NULL AS changed_file_id)"
            " FROM events WHERE file_id = 1"
        )
        con.execute("UPDATE events SET resolved_at_utc = NULL, changed_file_id = NULL WHERE file_id = 1")
        con.execute(f"UPDATE events SET event_key = {_OLD_KEY} WHERE file_id = 2")  # noqa: S608
        con.execute("SET TimeZone = 'UTC'")
        con.execute("DELETE FROM migrations")
        rebuild.rebuild_incidents(con, full=True)
    assert con.sql("SELECT count(*) FROM events WHERE node_id = 'n1'").fetchall() == [(2,)]
    [c] = ingest_files(con, [third], BERLIN)
    assert (c.rows_ingested, c.rows_duplicate) == (0, 2)
    assert _snapshot(con) == want
    assert con.sql("SELECT name, detail FROM migrations").fetchall() == [
        ("canonical_key_utc", "2 canonical event key(s) redone in UTC, 1 copy(ies) merged")
    ]
    assert canonical_store.rekey_stored_incidents(con) is None  # once
    assert clean.sql("SELECT detail FROM migrations").fetchall() == [
        ("0 canonical event key(s) redone in UTC, 0 copy(ies) merged",)
    ]


def test_the_re_keying_leaves_other_readers_events_alone(con, write):
    """A warehouse from before source_format existed labels its kernel-log events canonical (the
    column's default): their key is another reader's, and redoing it would store the log again."""
    log = "2026-03-02T04:26:29+0000 node-017 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python\n"
    ingest_files(con, [write("kern.log", log)], ReaderOptions(cluster="c1"))
    con.execute("UPDATE events SET source_format = 'canonical'")
    con.execute("DELETE FROM migrations")
    keys = con.sql("SELECT event_key FROM events").fetchall()
    assert canonical_store.rekey_stored_incidents(con).startswith("0 canonical event key(s) redone")
    assert con.sql("SELECT event_key FROM events").fetchall() == keys
