"""The optimizer protocol: what every prompt optimizer runs under (optimize → validate → test).

Modules (each small, each with its contract in its docstring; `docs/protocol.md` for users):
- `job`, `phases`: which phases run, and the three phases themselves.
- `method`: the interface a method sees (`OptimizeContext`: `TeamSpec`, `Evaluator`,
  `LanguageModels`, `Recorder`; `Rollout`); `methods/`: the methods; `strategies/`: what the
  native methods share (seeded batch sampling, the paired gate).
- `context`: the optimize phase's context, composed of `evaluator` (charged rollouts with
  replay), `recorder` (history, checkpoints) and the uncharged calls; `journal` (charged
  rollouts, kept whole, and the history) and `calls` (uncharged reflect / judge / probe calls)
  make a job resume by replay.
- `teamrun`, `gradecache`, `outcomes`: one graded team run, its grade cache, and how an outcome
  counts (usable, refused by the server, abstaining, infrastructure); `evaluation`: the
  uncharged, per-item-resumable evaluations of validate and test.
- `budget`: the ledger of usable full-team rollouts (reserve before dispatch; infrastructure
  failures refunded and retried with the same seeds; the refusal watch; uncharged usage).
- `seeds`: the logical seed of every model request; `bundle`: prompt bundles; `splits`: the
  split rule and the guards that keep test rows away from optimizers.
- `graph` (the team graph and each role's input/output in a run), `embed` (sentence embeddings).
- `artifacts`: the files of a job directory and the rules for reusing one; `conformance`,
  `provenance`, `settings`: what job.json judges, where a session ran, the method settings.
- `stats`, `aggregate`, `fingerprint`, `jobcost`: the grid summary over seeds.
"""
