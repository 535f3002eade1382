"""Execute ``notebooks/stepping.ipynb`` from its own folder and check that every cell ran, and that at every
pause it makes (each ``step()`` and ``run()``) nothing was ahead of the clock."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "stepping.ipynb"

WATCH_PAUSES = '''
import simmodel

_checked_pauses = []


def _check_pause(sim):
    """No request arrived, and no token or event-log row is stamped, after now (integer ns). The raw log
    may hold the pass_begin of the pass an async engine committed after the one in flight, kept out of
    ``sim.events`` until it begins."""
    now = sim.env.now
    for r in sim.requests:
        for name in ("arrived_at", "first_admitted_at", "first_token_at", "last_token_at", "finished_at"):
            at = getattr(r, name)
            assert at is None or at <= now, (sim.now, r.request_id, name, at)
    assert (sim.events.time_s <= sim.now).all(), sim.now
    ahead = [e for e in sim.recorder.events if e.time_ns > now]
    assert all(e.kind.name == "PASS_BEGIN" for e in ahead), (sim.now, ahead[:3])
    _checked_pauses.append(sim.now)


def _watched(method):
    def call(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        _check_pause(self)
        return out
    return call


simmodel.Simulation.step = _watched(simmodel.Simulation.step)
simmodel.Simulation.run = _watched(simmodel.Simulation.run)
'''


def test_stepping_notebook_runs_and_never_shows_anything_after_now() -> None:
    """Every cell of the stepping notebook runs without error, with notebooks/ as the working directory;
    a first cell added here checks the simulation after every ``step()`` and ``run()`` the notebook makes,
    and a last one that the 20 steps and the runs were checked."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    num_cells = len(nb.cells)
    nb.cells.insert(0, nbformat.v4.new_code_cell(WATCH_PAUSES))
    nb.cells.append(nbformat.v4.new_code_cell("assert len(_checked_pauses) >= 20, _checked_pauses"))
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell (a failed check included)
    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
    assert all(cell.get("execution_count") for cell in nb.cells if cell.cell_type == "code")
    assert len(nb.cells) == num_cells + 2
