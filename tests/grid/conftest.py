"""The grid tests' shared fixtures: one scripted server and one reference grid for the session
(the reference costs a whole grid run, so the executors' tests compare against the same one)."""

import os

import pytest

from lcb.grid.executors import RunOptions, run_slurm
from lcb.grid.plan import plan
from lcb.grid.spec import load_spec
from tests.helpers_grid import dead_url, grid_env, grid_model, small_grid, write_spec
from tests.scripted_server import scripted_server


@pytest.fixture(scope="session")
def server():
    with scripted_server(grid_model()) as running:
        yield running


@pytest.fixture(scope="session")
def reference(server, tmp_path_factory):
    """The small grid run whole by submitit's local executor (its spec path)."""
    data = small_grid(server.base_url, slurm={"cluster": "local", "log_folder": ".grid/sub"})
    data["models"]["scripted"]["endpoints"] = [dead_url(), server.base_url]
    path = write_spec(tmp_path_factory.mktemp("submitit"), data)
    spec = load_spec(path)
    with pytest.MonkeyPatch.context() as patch:
        for name in set(os.environ) - set(grid_env()):
            patch.delenv(name)
        outcomes = run_slurm(plan(spec), spec, RunOptions(wait=True))
    assert [o.status for o in outcomes] == ["done"] * 8, outcomes
    return path
