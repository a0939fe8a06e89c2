"""The optimizer registry: method key -> factory (see `lcb.optimize.method` for the contract).

One module per method; registering a method is one line here, under a key that
`lcb.registry.METHODS` names (the keys equal that list, in its order: tests/test_registry.py).
A method module with settings exposes `SETTINGS = <its settings dataclass>`
(`lcb.optimize.settings`).
- `resolve_settings(key, overrides)`: the method's full settings (defaults included) as a JSON
  dict, with `overrides` (`--set` pairs, dotted keys for nested fields) checked and applied.
- `get_optimizer(key, **settings)` builds the method from such settings (full or partial;
  nested dataclasses from nested dicts) and hands the factory its typed top-level fields.
Both raise `UnknownMethod` (a ValueError) naming the known keys for an unknown key, and
`SettingsError` (a ValueError) naming a bad setting.
- `check_topology(key, topology)` refuses the `TEAM_METHODS` on `single`, naming the
  `SINGLE_AGENT_METHODS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lcb.optimize.cell import check_method_fits
from lcb.optimize.method import Optimizer, OptimizerFactory
from lcb.optimize.methods import (
    gepa_method,
    hivemind,
    identity,
    mamut_gepa,
    mapro,
    maspo,
    maspob,
    mipro_method,
    tavo,
)
from lcb.optimize.settings import build, resolve, settings_class

OPTIMIZERS: dict[str, OptimizerFactory] = {  # the specification's grid order (`METHODS`)
    identity.KEY: identity.make,
    gepa_method.KEY: gepa_method.make,
    mipro_method.KEY: mipro_method.make,
    mamut_gepa.KEY: mamut_gepa.make,
    tavo.KEY: tavo.make,
    maspo.KEY: maspo.make,
    hivemind.KEY: hivemind.make,
    mapro.KEY: mapro.make,
    maspob.KEY: maspob.make,
}


class UnknownMethod(ValueError):
    """A method key that is not in `OPTIMIZERS`."""


def check_topology(key: str, topology: str) -> None:
    """Refuse an unknown key, and a multi-agent method on the single-agent team
    (`lcb.optimize.cell.check_method_fits`)."""
    _factory(key)
    check_method_fits(key, topology)


def _factory(key: str) -> OptimizerFactory:
    factory = OPTIMIZERS.get(key)
    if factory is None:
        known = ", ".join(sorted(OPTIMIZERS))
        raise UnknownMethod(f"unknown optimizer method {key!r}; known: {known}")
    return factory


def resolve_settings(key: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The full settings of method `key` with `overrides` applied (the method's defaults when
    none): what `job.json` records as `method_settings`."""
    return resolve(settings_class(_factory(key)), overrides or {}, method=key)


def get_optimizer(key: str, **settings: Any) -> Optimizer:
    """Build the optimizer registered under `key` with its keyword `settings`."""
    factory = _factory(key)
    if not settings:
        return factory()
    cls = settings_class(factory)
    if cls is None:
        resolve(None, settings, method=key)  # raises: the method takes no settings
    resolved = resolve(cls, settings, method=key)  # checks every key and value
    built = build(cls, resolved)
    return factory(**{field.name: getattr(built, field.name)
                      for field in dataclasses.fields(built) if field.init})
