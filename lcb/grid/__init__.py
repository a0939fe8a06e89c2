"""`lcb grid`: plan, run, resume and report an experiment grid through an existing engine.

The pieces, one concept each: `spec` (grid.yaml, checked; its field rules and engine
sections in `spec_fields`), `plan` (spec -> jobs, each a command
a user could type, and `--shard i/N`), `jobrun` (the one job function every executor runs,
with its retries), `launch` (one attempt as a process: start, heartbeat, stop), `limits`
(retries, time limits, the grid's token and time budgets), `checks` (the endpoint check before
a job starts), `state` (what the grid keeps beside its jobs: state files, logs, how a status
is read), `executors` (the local pool; `slurm` through submitit, with `slurm_view`: Slurm's
own view of the tasks; `ray_tasks`), `status` (done / running / failed / pending per axis),
`spend` (what a job has spent so far), `status_html` (the status as a static page, with each
cell's spend) and `report` (the aggregate, then `lcb report`). The command is `lcb.cli.grid_cmd`;
docs/grid.md is the spec reference.
"""
