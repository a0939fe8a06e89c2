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
