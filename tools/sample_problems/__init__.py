"""The hand-written problems of lcb's bundled sample set, one module per problem.

Each module defines `build() -> SampleProblem` (statement, starter code, tests) and the oracle
that computes its expected outputs. Reference solutions are not here: they live, hand-written,
in lcb/data/sample/solutions/<id>.py, so that grading them against these tests compares two
independent implementations.

Ids: every sample id starts with `lcbs_` ("LCB sample"), a prefix no LiveCodeBench
question_id uses, followed by the shape of its platform's ids: `lcbs_abc901_a` (AtCoder),
`lcbs_9901_A` (Codeforces), `lcbs_9001` (LeetCode).
"""

from __future__ import annotations

import pkgutil
import re
from importlib import import_module
from types import ModuleType

from ._kit import Case, SampleProblem

__all__ = ["Case", "SampleProblem", "all_problems"]

# Problem modules are named pNN_<title>; NN fixes their order in the rows file.
_MODULE_NAME = re.compile(r"p\d\d_\w+")


def problem_modules() -> list[ModuleType]:
    """The problem modules of this package, in name order."""
    names = sorted(info.name for info in pkgutil.iter_modules(__path__)
                   if _MODULE_NAME.fullmatch(info.name))
    return [import_module(f"{__name__}.{name}") for name in names]


def all_problems() -> list[SampleProblem]:
    """Every sample problem, in the order of the rows file."""
    return [module.build() for module in problem_modules()]
