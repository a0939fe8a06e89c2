"""The optimizer protocol: what every prompt optimizer runs under (optimize → validate → test).

Modules (each small, each with its contract in its docstring):
- `splits`: the deterministic train / validation / test rule, the split file, and the guards
  that keep test rows away from optimizers (`OptimizerData`, `load_test_problems`).
- `budget`: the ledger of usable full-team rollouts (reserve before dispatch; infrastructure
  failures refunded and retried with the same seeds; reflection usage recorded, never charged).
- `seeds`: the logical seed of every model request (blake2b of phase, iteration, row, role and
  turn, offset by 1000 × optimizer seed).
- `bundle`: prompt bundles (`{role: text}`): validation of proposals, content hashes, copies.
- `artifacts`: the files of a job directory and the rules for reusing one.
- `stats`, `aggregate`: paired statistics over seeds and the grid summary.

An optimizer method is one module on top of these: it receives the seed bundle (read-only),
an `OptimizerData` and a `BudgetLedger`, and returns a new, validated bundle.
"""
