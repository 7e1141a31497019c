"""Where extract's tasks run: ``local`` (a process pool on this machine) or ``ray`` (Ray Data).

Both run the same picklable function, one input file per task, and return its results in the
order of the tasks. A task whose worker dies (killed, out of memory) is run again (local: by a
fresh pool; Ray: Ray Data's default, which retries a task that lost its worker, ``max_retries`` as
an argument being deprecated in Ray 2.60); the task itself gives up after :data:`ATTEMPTS` deaths
(:mod:`pipeline.extract`). Its outputs are whole files renamed into place and its manifest entry
comes last (:mod:`pipeline.extract`), so a
second run of a task never counts a line twice.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress

import numpy as np

ENGINES = ("local", "ray")
ATTEMPTS = 3
RAY_EXTRA = "pip install 'failcast[ray]'"

Task = Callable[[Mapping], dict]


class EngineError(RuntimeError):
    """The engine cannot run the tasks (not installed, cluster out of reach); the message is one
    line for people that says why and what to do."""


class EngineMissing(EngineError):
    """The engine's package is not installed; the message says how to install it."""


# what Ray's errors say when the cluster uses token authentication and this process has no valid
# token (Ray >= 2.52: the client's AuthenticationError, "RPC error: InvalidAuthToken: ...", wrapped
# by ray.init in "Failed to connect to GCS" and then "Failed to connect to Ray cluster at ...")
_TOKEN_AUTH = ("AuthenticationError", "InvalidAuthToken", "Unauthenticated", "authentication token")
TOKEN_ADVICE = (
    "the cluster uses token authentication: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to a copy of "
    "its token file (~/.ray/auth_token on the head node), or RAY_AUTH_TOKEN, and run again "
    "(docs/operations.md)"
)


def _chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first."""
    chain: list[BaseException] = []
    while exc is not None and len(chain) < 10:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def ray_connection_error(exc: BaseException, address: str | None) -> EngineError:
    """The one line ``failcast extract`` prints when ``ray.init`` fails: where, what to set when the
    cluster uses token authentication, and Ray's own reason: the innermost message of the chain (of
    one that carries a traceback as text, ray.init's "Failed to connect to GCS. Last connection
    error: Traceback ...", its last line, the error that traceback ended in)."""
    chain = _chain(exc)
    reason = str(chain[-1]) or type(chain[-1]).__name__
    if "Traceback (most recent call last)" in reason:
        reason = next(line for line in reversed(reason.splitlines()) if line.strip())
    said = "\n".join(f"{type(e).__name__}: {e}" for e in chain)
    advice = f"{TOKEN_ADVICE}. " if any(word in said for word in _TOKEN_AUTH) else ""
    where = f"the Ray cluster at {address}" if address else "a local Ray instance"
    reason = " ".join(reason.split())
    return EngineError(f"--engine ray: cannot connect to {where}: {advice}Ray says: {reason}")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_tasks(
    engine: str, task: Task, items: Sequence[Mapping], *, workers: int | None, address: str | None
) -> list[dict]:
    if not items:
        return []
    if engine == "ray":
        return run_ray(task, items, workers=workers, address=address)
    return run_local(task, items, workers=workers or cores())


def run_local(task: Task, items: Sequence[Mapping], *, workers: int) -> list[dict]:
    """``task`` over ``items`` in ``workers`` spawned processes. A dead worker breaks the pool and
    takes the tasks then running in the other workers down with it: those run again in a fresh
    pool, and after a second loss each alone, so only the task that kills its worker is lost again
    (the task counts its own deaths and reports itself failed after :data:`ATTEMPTS`)."""
    results: dict[int, dict] = {}
    lost = _pool(task, items, range(len(items)), workers, results)
    if lost:
        lost = _pool(task, items, lost, workers, results)
    for _ in range(ATTEMPTS):
        lost = [i for i in lost if _pool(task, items, [i], 1, results)]
    if lost:
        raise RuntimeError(f"{items[lost[0]]['source']}: the worker parsing it kept dying (out of memory?)")
    return [results[i] for i in range(len(items))]


def _pool(task: Task, items: Sequence[Mapping], indices: Sequence[int], workers: int, results: dict) -> list:
    """Run the tasks ``indices`` in a fresh pool into ``results``; returns those lost with a worker."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(workers, len(indices)), mp_context=context) as pool:
        futures = {pool.submit(task, items[i]): i for i in indices}
        for future in as_completed(futures):
            with suppress(BrokenProcessPool):
                results[futures[future]] = future.result()
    return [i for i in indices if i not in results]


def _run_batch(batch: dict[str, np.ndarray], task: Task) -> dict[str, np.ndarray]:
    """A Ray Data batch of JSON tasks -> their results as JSON (plain strings travel as Arrow)."""
    done = [json.dumps(task(json.loads(item))) for item in batch["task"]]
    return {"result": np.array(done, dtype=object)}


def run_ray(task: Task, items: Sequence[Mapping], *, workers: int | None, address: str | None) -> list[dict]:
    """``task`` over ``items`` with Ray Data: one block per input file, ``map_batches`` with one
    file per batch and one CPU per task, so Ray spreads the files over the cluster's cores (and
    reruns a task whose worker died). Joins the cluster at ``address`` (``auto``: the one this
    machine belongs to; default: ``RAY_ADDRESS``), or uses the Ray session already started in this
    process, or starts a local one with ``workers`` CPUs (default: the cores) and stops it after."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise EngineMissing(f"--engine ray needs Ray: {RAY_EXTRA}") from exc
    address = address or os.environ.get("RAY_ADDRESS")  # ray.init's own default: a cluster, not num_cpus
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(
                address=address,
                num_cpus=None if address else workers or cores(),
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=True,
            )
        except Exception as exc:  # joining the cluster is the user's setup: say why, in one line
            raise ray_connection_error(exc, address) from exc
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # progress lines on stderr: extract reports itself
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        dataset = ray.data.from_items(
            [{"task": json.dumps(dict(item))} for item in items], override_num_blocks=len(items)
        )
        mapped = dataset.map_batches(
            _run_batch,
            fn_kwargs={"task": task},
            batch_size=1,
            batch_format="numpy",
            num_cpus=1,
        )
        by_source = {}
        for row in mapped.take_all():
            result = json.loads(row["result"])
            by_source[result["path"]] = result
    finally:
        if started:
            ray.shutdown()
    return [by_source[item["source"]] for item in items]
