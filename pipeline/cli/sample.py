"""failcast sample: write a simulated fleet with known failure behaviour."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline import config as config_mod
from pipeline import sample as sample_mod
from pipeline.cli.common import (
    fail,
    main,
)


# --- sample --------------------------------------------------------------------------------------
@main.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=config_mod.SAMPLE_DIR,
    show_default=True,
)
@click.option("--seed", type=int, default=sample_mod.FleetSpec.seed, show_default=True)
@click.option(
    "--rate",
    "rate_pct",
    type=float,
    default=0.05,
    show_default=True,
    help="True interrupting failure rate, % per instance-hour.",
)
@click.option(
    "--shape",
    type=float,
    default=sample_mod.FleetSpec.weibull_shape,
    show_default=True,
    help="Weibull shape of each node's times between failures.",
)
@click.option("--days", type=float, default=sample_mod.FleetSpec.days, show_default=True)
@click.option(
    "--sizes",
    default="32,64,128,256,512,1024",
    show_default=True,
    help="Comma-separated instance counts, one cluster each.",
)
def sample(out: Path, seed: int, rate_pct: float, shape: float, days: float, sizes: str) -> None:
    """Write a simulated fleet (incidents.csv, inventory.csv) with known failure behaviour."""
    try:
        cluster_sizes = tuple(int(s) for s in sizes.split(","))
    except ValueError:
        fail(f"--sizes {sizes!r}: expected comma-separated integers like 32,64,128")
    if rate_pct <= 0 or shape <= 0 or days <= 0 or min(cluster_sizes) < 1:
        fail("--rate, --shape, --days and every --sizes value must be positive")
    spec = sample_mod.FleetSpec(
        cluster_sizes=cluster_sizes,
        days=days,
        rate_per_node_hour=rate_pct / 100,
        weibull_shape=shape,
        seed=seed,
    )
    fleet = sample_mod.simulate_fleet(spec)
    for path in fleet.write(out):
        click.echo(f"wrote {path}")
