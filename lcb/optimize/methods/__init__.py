"""The optimizer registry: method key -> factory (see `lcb.optimize.method` for the contract).

One module per method; registering a method is one line here. `get_optimizer(key)` is how the
job finds one, and raises `UnknownMethod` (a ValueError) naming the known keys.
"""

from __future__ import annotations

from lcb.optimize.method import Optimizer, OptimizerFactory
from lcb.optimize.methods import gepa_method, identity, mipro_method

OPTIMIZERS: dict[str, OptimizerFactory] = {
    identity.KEY: identity.make,
    gepa_method.KEY: gepa_method.make,
    mipro_method.KEY: mipro_method.make,
}


class UnknownMethod(ValueError):
    """A method key that is not in `OPTIMIZERS`."""


def get_optimizer(key: str, **settings: object) -> Optimizer:
    """Build the optimizer registered under `key` with its keyword `settings`."""
    factory = OPTIMIZERS.get(key)
    if factory is None:
        known = ", ".join(sorted(OPTIMIZERS))
        raise UnknownMethod(f"unknown optimizer method {key!r}; known: {known}")
    return factory(**settings)
