from __future__ import annotations

from pathlib import Path

import pytest

from tests.extract._lake_fleet import write_fleet


@pytest.fixture
def fleet(tmp_path) -> list[Path]:
    return write_fleet(tmp_path / "logs")
