"""Strategies the native methods share instead of keeping their own copies.

- `batches`: which rows a method runs, drawn with an injected RNG (`seeded_rng`, `draw`,
  `shuffled`, `ordered_subset`, `fill`, `Rotation`).
- `gates`: the paired comparison of two bundles on the rows both got a score for
  (`pair`, `strictly_better`, `scores_of`).

Each is a small pure module (no context, no I/O), tested with exact expectations in
`tests/optimize/test_strategies.py`. A method that switches to one keeps its behaviour: the samplers
consume the RNG exactly as the Python calls they name do, so a seed draws the same rows.
"""
