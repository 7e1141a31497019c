"""Every notebook is stored without outputs, calls ``pipeline`` for its logic, and runs to the end headless
(against the sample warehouse in ``$FAILCAST_DB``; notebooks on the public data sets skip when those
are absent).

The kernel is the ``python3`` kernel of this interpreter: its spec runs ``python``, so the test puts
this interpreter's folder first on PATH, and checks from inside the kernel which Python runs.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
IMPORT = re.compile(r"^\s*(?:from\s+(\S+)\s+import|import\s+(\S+))", re.MULTILINE)
DEFINITION = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s", re.MULTILINE)


def test_there_is_a_notebook_per_question():
    assert len(NOTEBOOKS) >= 3, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "clear outputs before committing"
    modules = {(a or b).split(".")[0] for c in code for a, b in IMPORT.findall(c.source)}
    assert "pipeline" in modules
    defined = [c.source for c in code if DEFINITION.search(c.source)]
    assert not defined, f"notebooks call pipeline, they do not define logic of their own: {defined}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_to_the_end(path, sample_warehouse, tmp_path, monkeypatch):
    monkeypatch.setenv("FAILCAST_DB", str(sample_warehouse))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    nb = nbformat.read(path, as_version=4)
    if any("shared_datasets_dir" in c.source for c in nb.cells):
        from pipeline.readers.public_data import shared_datasets_dir

        if not shared_datasets_dir().exists():
            pytest.skip(f"public data sets not found at {shared_datasets_dir()}")
    probe = nbformat.v4.new_code_cell("import sys, pipeline\nprint(sys.prefix)\nprint(pipeline.__file__)")
    nb.cells.append(probe)
    NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()  # raises CellExecutionError naming the cell on any error

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    # The kernel may send one print as several stream messages (it flushes on a timer, and a loaded
    # machine splits them), so the probe's answer is all of its stdout joined.
    stdout = "".join(o["text"] for o in probe.outputs if o.output_type == "stream" and o.name == "stdout")
    prefix, package = stdout.split()
    assert prefix == sys.prefix, "the kernel must run this interpreter's environment"
    assert Path(package).is_relative_to(REPO)
