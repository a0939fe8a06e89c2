"""`lcb grid`: plan, run, resume and report an experiment grid through an existing engine.

The pieces, one concept each: `spec` (grid.yaml, checked), `plan` (spec -> jobs, each a command
a user could type, and `--shard i/N`), `jobrun` (the one job function every executor runs),
`checks` (the endpoint check before a job starts), `state` (what the grid keeps beside its
jobs: state files, logs, how a status is read), `executors` (the local pool; `slurm` through
submitit; `ray_tasks`), `status` (done / running / failed / pending per axis) and `report`
(the aggregate, then `lcb report`). The command is `lcb.cli.grid_cmd`; docs/grid.md is the spec
reference.
"""
