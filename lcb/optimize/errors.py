"""The errors an optimizer job ends with that a command maps to its exit codes.

Defined here, apart from the modules that raise them (`lcb.optimize.phases`,
`lcb.optimize.evaluation`, which re-export them), so that `lcb optimize` can name them without
loading the model stack. `Misconfigured` (an endpoint refusing the job's requests) is in
`lcb.optimize.outcomes`, also light.
"""


class JobError(RuntimeError):
    """A phase that cannot run as asked (a missing earlier phase, a method's bad result)."""


class EvaluationIncomplete(RuntimeError):
    """Items whose evaluation failed for infrastructure reasons on every try."""


class BudgetTooSmall(ValueError):
    """The budget cannot buy the method one scored proposal (or one full cycle): raised before
    anything is charged, naming the smallest budget that would (`lcb optimize` exits 2)."""

    def __init__(self, method: str, *, needed: int, budget: int, what: str) -> None:
        super().__init__(
            f"method {method!r} needs a budget of at least {needed} to buy {what} at these "
            f"sizes; --budget is {budget}, so it would keep the seed after spending rollouts "
            f"on nothing it could use. Raise --budget to {needed} or more, or pass "
            "--allow-small-budget to run it anyway (it keeps the seed)")
        self.needed, self.budget = needed, budget
