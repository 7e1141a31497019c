"""Clear words at the edges of extract (issue 28, item 6): Ray's reason for refusing a connection
passed on in one line with exit 2, and a lake with no finished input named as such.

The Ray errors below are the chains Ray 2.60's ``ray.init(address=HOST:PORT)`` raised against a
``ray start --head`` cluster with token authentication (run on this machine's loopback once, the
tracebacks cut): no token in the client, ``RAY_AUTH_MODE=token`` without a token file, and no
cluster at the address. A fake ``ray`` module raises them, so neither Ray nor a cluster is needed.
"""

from __future__ import annotations

import sys
import types

import pytest
from click.testing import CliRunner

from pipeline.cli import main

TOKEN_HELP = (
    "Ensure that the token for the cluster is available in a local file (e.g., ~/.ray/auth_token or via "
    "RAY_AUTH_TOKEN_PATH) or as the `RAY_AUTH_TOKEN` environment variable. To generate a token for local "
    "development, use `ray get-auth-token --generate` For remote clusters, ensure that the token is "
    "propagated to all nodes of the cluster when token authentication is enabled. For more information, "
    "see: https://docs.ray.io/en/latest/ray-security/token-auth.html"
)
NO_TOKEN_SENT = (
    "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing or "
    f"incorrect. Note: RAY_AUTH_MODE is currently 'disabled' (not 'token'). {TOKEN_HELP}"
)


def _gcs_failure(last_line: str) -> ConnectionError:
    """ray.init's chain: ConnectionError from Node's RuntimeError, whose text holds the traceback of
    the last attempt to reach the GCS."""
    traceback = (
        "Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n"
        '  File ".../ray/_private/node.py", line 996, in _init_gcs_client\n'
        "    client = GcsClient(\n"
        '  File "python/ray/includes/common.pxi", line 119, in ray._raylet.check_status\n'
        f"{last_line}\n"
    )
    try:
        try:
            raise RuntimeError(traceback)
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:46380") from inner
    except ConnectionError as outer:
        return outer


class _AuthenticationError(Exception):
    """Stands in for ray.exceptions.AuthenticationError (its str is the message plus Ray's help)."""


_AuthenticationError.__name__ = "AuthenticationError"


def _fake_ray(monkeypatch, error: BaseException) -> None:
    ray = types.ModuleType("ray")
    ray.is_initialized = lambda: False

    def init(**kwargs):
        raise error

    ray.init = init
    ray.data = types.ModuleType("ray.data")
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.data", ray.data)


def _extract(fleet, tmp_path, *address: str):
    args = ["extract", str(fleet[0]), "--out", str(tmp_path / "lake"), "--engine", "ray", *address]
    return CliRunner().invoke(main, args)


ADVICE = (
    "the cluster uses token authentication: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to a copy of "
    "its token file (~/.ray/auth_token on the head node), or RAY_AUTH_TOKEN, and run again "
    "(docs/operations.md)."
)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (  # ray start --head with token auth on; the client sets nothing
            _gcs_failure(NO_TOKEN_SENT),
            f"the Ray cluster at 127.0.0.1:46380: {ADVICE} Ray says: {NO_TOKEN_SENT}",
        ),
        (  # RAY_AUTH_MODE=token but no token file
            _AuthenticationError(
                f"Token authentication is enabled but no authentication token was found. {TOKEN_HELP}"
            ),
            f"the Ray cluster at 127.0.0.1:46380: {ADVICE} Ray says: Token authentication is enabled but no "
            f"authentication token was found. {TOKEN_HELP}",
        ),
        (  # nothing listens at the address: Ray's reason, no word of tokens
            _gcs_failure("ray.exceptions.RpcError: Timed out while waiting for GCS to become available."),
            "the Ray cluster at 127.0.0.1:46380: Ray says: ray.exceptions.RpcError: Timed out while waiting "
            "for GCS to become available.",
        ),
    ],
    ids=["no-token", "no-token-file", "no-cluster"],
)
def test_rays_reason_for_refusing_the_connection_is_one_line_and_exit_2(
    fleet, tmp_path, monkeypatch, error, expected
):
    _fake_ray(monkeypatch, error)
    result = _extract(fleet, tmp_path, "--address", "127.0.0.1:46380")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"failcast: --engine ray: cannot connect to {expected}"]
    assert result.stdout == ""


def test_a_local_ray_that_cannot_start_says_so(fleet, tmp_path, monkeypatch):
    _fake_ray(monkeypatch, RuntimeError("Failed to start GCS.\n Last 0 lines of error files:\n\n."))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    result = _extract(fleet, tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "failcast: --engine ray: cannot connect to a local Ray instance: Ray says: Failed to start GCS. "
        "Last 0 lines of error files: ."
    ]


def test_ingesting_a_lake_whose_inputs_all_failed_says_it_holds_nothing(tmp_path):
    """Every input of the extract failed: the lake has its manifest folder and no entry. Ingesting
    it used to print nothing and exit 0."""
    odd = tmp_path / "events.json"
    odd.write_text('{"kind": "Node", "apiVersion": "v1"}\n')
    lake = tmp_path / "lake"
    extracted = CliRunner().invoke(main, ["extract", str(odd), "--out", str(lake)])
    assert extracted.exit_code == 2 and "0 of 1 file(s) extracted" in extracted.stdout
    assert (lake / "manifest").is_dir()
    result = CliRunner().invoke(main, ["ingest", str(lake), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"failcast: {lake}: the lake holds no finished input ({lake / 'manifest'} has no entry): every "
        "input of failcast extract failed or none has finished yet; see extract's errors, fix them and run "
        f"failcast extract SOURCE... --out {lake} again"
    ]
