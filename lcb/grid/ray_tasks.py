"""`--executor ray`: the grid's jobs as Ray tasks, on an existing cluster or a local instance.

Contract of `run_tasks(jobs, spec, options)`:
- Connects with `ray.init(address)`: `options.address`, else the spec's `ray.address` (a
  `ray://host:10001` client address, `auto`, or a head node's `host:6379`); with neither, a
  local instance starts with `ray.num_cpus` CPUs (default: this machine's). A cluster that
  cannot be reached or an instance that cannot start is `ExecutorUnavailable` naming Ray's
  error (`lcb grid run` exits 2).
- Each job is one task of `lcb.grid.jobrun.run_job` (`ray_job`: the job's state and log
  name the Ray node of each attempt) asking for `ray.cpus_per_job` CPUs, so the cluster's
  CPUs bound how many run at once. A task whose worker or node died (the job's own failures
  are outcomes, never errors) is run again by Ray on a live node, up to `ray.max_retries`
  times: its job waits for the dead runner's process to stop, then resumes from its journal.
  Workers need lcb installed (the same version) and the grid folder on a shared filesystem.
- Outcomes come back as tasks end (`options.on_outcome` on each); a task that died more often
  than that is a `failed` outcome naming Ray's error. Ctrl-C cancels the tasks (their jobs get
  SIGTERM through their worker), then `GridInterrupted`. The connection is closed at the end.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lcb.grid.jobrun import Outcome, run_job
from lcb.grid.limits import JobPolicy
from lcb.grid.plan import GridJob
from lcb.grid.spec import GridSpec

if TYPE_CHECKING:
    from lcb.grid.executors import RunOptions


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        from lcb.grid.executors import ExecutorUnavailable

        raise ExecutorUnavailable("--executor ray needs Ray: pip install -e '.[ray]'") from None
    return ray


def connect(ray: Any, spec: GridSpec, address: str | None) -> None:
    """`ray.init` for the grid (module docstring): settings only for a local instance, since
    Ray refuses them when it joins an existing cluster."""
    address = address or spec.ray.address
    if address is not None:
        ray.init(address=address)
        return
    kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
    if spec.ray.num_cpus is not None:
        kwargs["num_cpus"] = spec.ray.num_cpus
    ray.init(**kwargs)


def ray_job(job: GridJob, policy: JobPolicy) -> Outcome:
    """`run_job` in a Ray worker, naming the node it runs on."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    return run_job(job, policy=policy, where=f"ray node {node[:12]}")


def run_tasks(jobs: Sequence[GridJob], spec: GridSpec, options: RunOptions) -> list[Outcome]:
    """Run `jobs` as Ray tasks (module docstring)."""
    from lcb.grid.executors import GridInterrupted

    if not jobs:
        return []
    ray = _ray()
    try:
        connect(ray, spec, options.address)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; each is "cannot start"
        from lcb.grid.executors import ExecutorUnavailable

        lines = str(exc).strip().splitlines()
        raise ExecutorUnavailable(f"cannot start or reach Ray: "
                                  f"{lines[-1] if lines else type(exc).__name__}") from None
    remote = ray.remote(num_cpus=spec.ray.cpus_per_job,
                        max_retries=spec.ray.max_retries)(ray_job)
    refs = {remote.remote(job, options.policy): job for job in jobs}
    outcomes: list[Outcome] = []
    try:
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            outcomes.append(_outcome(ray, refs[done[0]], done[0]))
            options.on_outcome(outcomes[-1])
    except KeyboardInterrupt:
        for ref in refs:
            ray.cancel(ref)
        raise GridInterrupted(signal.SIGINT) from None
    finally:
        ray.shutdown()
    return outcomes


def _outcome(ray: Any, job: GridJob, ref: Any) -> Outcome:
    try:
        return ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - a lost task is a failed job, reported
        lines = str(exc).strip().splitlines()
        return Outcome(job.key, "failed",
                       reason=f"ray task: {lines[-1] if lines else type(exc).__name__}")
