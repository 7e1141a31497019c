"""Generated multi-shard fleet logs, and the warehouse comparisons shared by the extract tests."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import polars as pl

from pipeline import ingest, warehouse

YEAR = 2026
NODES = [f"gpu-{i:02d}" for i in range(8)]
BUSES = ["18", "2a", "3a", "5d"]
# What one extract/ingest of the fleet below must count (checked against direct ingest too).
BAD_XID = "NVRM: Xid something unreadable"


def _kernel_log(shard: int, lines: int) -> str:
    """One node-group's kernel log: ordinary messages, Xid lines (some repeated within the file,
    one shared with the next shard), an Xid line without its PCI id and one with an impossible date."""
    out = []
    for i in range(lines):
        node = NODES[(shard * 3 + i) % len(NODES)]
        minute, second = divmod(i, 60)
        ts = f"{YEAR}-03-{1 + shard:02d}T{minute // 60:02d}:{minute % 60:02d}:{second:02d}+00:00"
        if i % 7 == 3:
            code = (79, 48, 13, 94)[i % 4]
            bus = BUSES[i % len(BUSES)]
            xid = f"NVRM: Xid (PCI:0000:{bus}:00): {code}, pid={i}, name=python3"
            out.append(f"{ts} {node} kernel: [{i}.5] {xid}")
        else:
            out.append(f"{ts} {node} kernel: [{i}.5] eth0: link is up, {i} packets")
    out.insert(10, out[3])  # the same Xid line again: a duplicate within the file
    out.append(f"{YEAR}-03-20T10:00:00+00:00 gpu-01 kernel: {BAD_XID}")
    out.append(f"{YEAR}-02-30T10:00:00+00:00 gpu-02 kernel: NVRM: Xid (PCI:0000:18:00): 48, DBE")
    out.append(f"Mar  9 11:00:0{shard} gpu-03 kernel: NVRM: Xid (PCI:0000:2a:00): 79, fell off the bus")
    out.append(f"{YEAR}-03-25T00:00:00+00:00 gpu-07 kernel: NVRM: Xid (PCI:0000:5d:00): 94, shared")
    return "\n".join(out) + "\n"


SACCT = """JobID|JobName|State|Start|End|ElapsedRaw|NNodes|NodeList
100|pretrain|NODE_FAIL|2026-03-01T00:00:00|2026-03-01T05:00:00|18000|4|gpu-[00-03]
100.batch|batch|CANCELLED|2026-03-01T00:00:00|2026-03-01T05:00:00|18000|1|gpu-00
101|eval|COMPLETED|2026-03-02T00:00:00|2026-03-02T02:00:00|7200|2|gpu-[04-05]
102|broken|COMPLETED|2026-03-02T00:00:00
103|finetune|NODE_FAIL|2026-03-03T00:00:00|2026-03-03T08:00:00|28800|8|gpu-[00-07]
101|eval|COMPLETED|2026-03-02T00:00:00|2026-03-02T02:00:00|7200|2|gpu-[04-05]
"""

# an extra column (level): kept as JSON attributes, through the lake too
INCIDENTS = """timestamp,cluster_id,node_id,category,gpu_index,job_id,message,resolved_at,level
2026-03-04T01:00:00Z,c1,gpu-00,Faulty GPU,1,100,replaced,2026-03-04T09:00:00Z,sev1
2026-03-05T02:00:00Z,c1,gpu-04,gpu_fell_off_bus,2,,,,sev2
2026-03-05T02:00:00Z,c1,gpu-04,gpu_fell_off_bus,2,,,,sev2
2026-04-06T03:00:00Z,c2,gpu-06,ECC,0,,,,
not-a-time,c1,gpu-01,ECC,0,,,,sev3
"""

INVENTORY = "cluster_id,node_id,instance_type,gpus_per_node,in_service_from,in_service_to\n" + "".join(
    f"{'c1' if i < 6 else 'c2'},{n},p5.48xlarge,8,2026-02-01T00:00:00Z,\n" for i, n in enumerate(NODES)
)

SLURM_EVENTS = """Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User
c1|gpu-[02-03]|2026-03-07T00:00:00|2026-03-07T06:00:00|DRAIN|Xid 79|root(0)
c1|gpu-05|2026-03-08T00:00:00|Unknown|DOWN*|Not responding|slurm(1)
c1|gpu-05|bad-time|Unknown|DOWN|x|y
"""


def write_fleet(folder: Path, shards: int = 3, lines: int = 400) -> list[Path]:
    """The fleet's input files in the order they are ingested: inventory, kernel-log shards, sacct,
    slurm node events, canonical incidents."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"inventory.csv": INVENTORY}
    files.update({f"kern-{s}.log": _kernel_log(s, lines) for s in range(shards)})
    files.update({"sacct.txt": SACCT, "events.txt": SLURM_EVENTS, "incidents.csv": INCIDENTS})
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


READER = ingest.ReaderOptions(year=YEAR, bus_order=BUSES)

# Columns whose values are the time of the run, not of the data
_RUN_TIME = {"ingested_at_utc", "rejected_at_utc"}


def tables(db: Path) -> dict[str, pl.DataFrame]:
    """Every data table of a warehouse, sorted, without run times."""
    con = warehouse.connect(db, read_only=True)
    try:
        out = {}
        for name in ("ingested_files", "events", "incidents", "inventory", "jobs", "rejects"):
            frame = warehouse.table(con, name)
            frame = frame.drop([c for c in frame.columns if c in _RUN_TIME])
            sortable = [c for c, t in frame.schema.items() if not isinstance(t, pl.List)]
            out[name] = frame.sort(sortable, nulls_last=True)
        return out
    finally:
        con.close()


def direct_ingest(files: list[Path], db: Path) -> list[ingest.FileSummary]:
    con = warehouse.connect(db)
    try:
        return ingest.ingest_files(con, files, READER)
    finally:
        con.close()


def lake_ingest(lake: Path, db: Path) -> list[ingest.FileSummary]:
    con = warehouse.connect(db)
    try:
        return ingest.ingest_files(con, [lake])
    finally:
        con.close()


def _die_after_first_rename() -> None:
    """From now on this process exits right after the first file it renames into the lake: a task
    killed mid-file, after a part is in place and before its manifest entry."""
    real = os.replace

    def replace_then_die(src, dst):
        real(src, dst)
        os._exit(1)

    os.replace = replace_then_die


def crash_once(task: Mapping, *, marker: str, victim: str, inner: Callable[[Mapping], dict]) -> dict:
    """``inner(task)``, except that the first attempt at the input named ``victim`` dies mid-file,
    as a killed or out-of-memory worker would."""
    if task["source"].endswith(victim) and not os.path.exists(marker):
        Path(marker).touch()
        _die_after_first_rename()
    return inner(task)


def crash_always(task: Mapping, *, victim: str, inner: Callable[[Mapping], dict]) -> dict:
    """``inner(task)``, except that every attempt at the input named ``victim`` dies mid-file (a file
    too big for a worker's memory)."""
    if task["source"].endswith(victim):
        _die_after_first_rename()
    return inner(task)
