"""Simulation of a job's spare pool, node by node: the check of :mod:`pipeline.projection.spares`.

Each of the N + S nodes is simulated as its own alternating renewal process — up for an
Exponential(r) time, then in repair for a time drawn from the repair curve (the Kaplan–Meier
step function, :meth:`RepairCurve.sample`) — started in its stationary state (in repair with
probability q = r m / (1 + r m), then for a remaining time with the equilibrium distribution,
drawn as U x a length-biased repair time; Cox 1962). The job is then walked through the merged
failures and repair ends with the assignment of nodes kept explicitly: N nodes in the job, the
other up nodes idle spares. A failure of a job node while the job runs is an interruption; it takes
an idle spare if there is one, else the job stalls until it has N up nodes again (repaired nodes
join it). Nothing here assumes the formulas it checks (the Engset form of B(S), E[W] = m / (S + 1)).

Statistics, over the interruptions after time 0 (the start is already stationary):

- ``free_spare_probability``: the share of interruptions that found an idle spare;
- ``mean_wait_hours``: for the others, the time to the first repair end among the nodes then in
  repair (the failed one included): the wait the analytic E[W(S)] describes;
- ``mean_stall_hours``: the time until the job has N up nodes again (longer when another node
  fails during the wait; Daly's model restarts the recovery for those);
- standard errors by batch means over ``batches`` equal slices of the horizon (interruptions in
  one slice are correlated through the pool's state, so the binomial error would be too small).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .spares import RepairCurve


@dataclass(frozen=True)
class PoolSimulation:
    interruptions: int
    free_spare_probability: float
    free_spare_probability_se: float
    stalls: int
    mean_wait_hours: float
    mean_wait_hours_se: float
    mean_stall_hours: float
    mean_in_repair: float  # time average of the nodes in repair


def _stationary_start(n: int, rate: float, repair: RepairCurve, rng: np.random.Generator):
    """(down at 0, remaining repair hours of those down) for n nodes in the stationary state."""
    m = repair.mean_hours
    q = rate * m / (1 + rate * m)
    down = rng.random(n) < q
    # length-biased repair times: atoms of the curve weighted by their length
    times = repair.timeline_hours
    mass = -np.diff(np.concatenate([[1.0], repair.survival]))
    mass[-1] += repair.survival[-1]  # the open tail sits at the last time (restricted convention)
    weights = times * mass
    remaining = np.zeros(n)
    if down.any() and weights.sum() > 0:
        biased = rng.choice(times, size=int(down.sum()), p=weights / weights.sum())
        remaining[down] = rng.random(biased.size) * biased
    return down, remaining


def _node_events(n: int, rate: float, repair: RepairCurve, horizon: float, rng: np.random.Generator):
    """Failure times, their repair ends and node ids of n stationary nodes up to ``horizon``."""
    down, remaining = _stationary_start(n, rate, repair, rng)
    cycles = int(math.ceil(horizon * rate * 1.5 + 6 * math.sqrt(horizon * rate + 1) + 4))
    while True:
        up = rng.exponential(1 / rate, (n, cycles))
        fix = repair.sample((n, cycles), rng)
        # a node down at 0 first finishes its repair, then alternates up / repair
        first_up = np.where(down, remaining, 0.0)
        ends_of_up = first_up[:, None] + np.cumsum(up + fix, axis=1) - fix  # failure times
        if (ends_of_up[:, -1] >= horizon).all():
            break
        cycles *= 2
    fail = ends_of_up
    repaired = fail + fix
    node = np.broadcast_to(np.arange(n)[:, None], fail.shape)
    keep = fail < horizon
    initial = np.flatnonzero(down)  # repairs under way at 0
    return fail[keep], repaired[keep], node[keep], initial, remaining[initial]


def simulate_pool(
    instances: int,
    spares: int,
    rate_per_node_hour: float,
    repair: RepairCurve,
    horizon_hours: float,
    rng: np.random.Generator,
    batches: int = 20,
) -> PoolSimulation:
    """Simulate the pool for ``horizon_hours`` (see the module docstring)."""
    n = instances + spares
    fail, repaired, node, initial, initial_end = _node_events(
        n, rate_per_node_hour, repair, horizon_hours, rng
    )
    # events: (time, kind, node, repair end); kind 0 = failure, 1 = repair ends (a tie: the failure
    # first, so a repair of zero length ends after its failure)
    times = np.concatenate([initial_end, repaired, fail])
    kinds = np.concatenate([np.ones(initial.size + repaired.size, np.int8), np.zeros(fail.size, np.int8)])
    nodes = np.concatenate([initial, node, node])
    ends = np.concatenate([initial_end, repaired, repaired])
    order = np.lexsort((kinds, times))
    repair_end = dict(zip(initial.tolist(), initial_end.tolist(), strict=True))  # nodes in repair
    up = [i for i in range(n) if i not in repair_end]
    job, idle = set(up[:instances]), set(up[instances:])
    running = len(job) == instances
    stalled_at = math.nan
    width = horizon_hours / batches
    found = np.zeros(batches)
    total = np.zeros(batches)
    waits: list[list[float]] = [[] for _ in range(batches)]
    stalls: list[float] = []
    area, last = 0.0, 0.0
    for t, kind, i, end in zip(
        times[order].tolist(), kinds[order].tolist(), nodes[order].tolist(), ends[order].tolist(), strict=True
    ):
        if t >= horizon_hours:
            break
        area += len(repair_end) * (t - last)
        last = t
        if kind == 0:  # node i fails
            repair_end[i] = end
            if i in idle:
                idle.discard(i)
                continue
            job.discard(i)
            if not running:
                continue
            b = min(int(t / width), batches - 1)
            total[b] += 1
            if idle:
                job.add(idle.pop())
                found[b] += 1
            else:
                running, stalled_at = False, t
                waits[b].append(min(repair_end.values()) - t)
        else:  # node i is back
            repair_end.pop(i, None)
            if running:
                idle.add(i)
                continue
            job.add(i)
            if len(job) == instances:
                running = True
                if not math.isnan(stalled_at):  # not the start: a job that began short of nodes
                    stalls.append(t - stalled_at)
    area += len(repair_end) * (horizon_hours - last)
    share = np.divide(found, total, out=np.full(batches, np.nan), where=total > 0)
    wait_means = np.array([np.mean(w) if w else np.nan for w in waits])
    all_waits = [w for ws in waits for w in ws]

    def se(values: np.ndarray) -> float:
        ok = values[np.isfinite(values)]
        return float(ok.std(ddof=1) / math.sqrt(ok.size)) if ok.size > 1 else math.nan

    return PoolSimulation(
        interruptions=int(total.sum()),
        free_spare_probability=float(found.sum() / total.sum()) if total.sum() else math.nan,
        free_spare_probability_se=se(share),
        stalls=len(all_waits),
        mean_wait_hours=float(np.mean(all_waits)) if all_waits else math.nan,
        mean_wait_hours_se=se(wait_means),
        mean_stall_hours=float(np.mean(stalls)) if stalls else math.nan,
        mean_in_repair=area / horizon_hours,
    )
