"""The project as users get it: a built wheel holds every subpackage, and the tree is ruff clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_every_subpackage(tmp_path: Path) -> None:
    """A non-editable install must not miss ``pipeline.cli``, ``pipeline.report`` & co."""
    source = tmp_path / "src"  # build from a copy: setuptools writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT / "pipeline", source / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path, source],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("failcast-*.whl")
    packaged = {Path(n).parent.as_posix() for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")}
    expected = {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "pipeline").rglob("__init__.py")}
    assert expected <= packaged, f"missing from the wheel: {sorted(expected - packaged)}"


def test_ruff_clean() -> None:
    for args in (["check", "."], ["format", "--check", "."]):
        done = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
