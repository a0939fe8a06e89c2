"""`identity`: the baseline method. It returns a copy of the seed bundle and spends no rollout."""

from __future__ import annotations

from dataclasses import dataclass

from lcb.optimize.bundle import thaw
from lcb.optimize.method import Bundle, OptimizeContext

KEY = "identity"


@dataclass(frozen=True)
class Identity:
    """The seed prompts, unchanged: what every other method is compared against."""

    key: str = KEY

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """A new dict equal to `ctx.seed_bundle`; no rollout, no reflection."""
        return thaw(ctx.seed_bundle)


def make(**settings: object) -> Identity:
    """The factory of `OPTIMIZERS["identity"]`; it takes no settings."""
    if settings:
        raise TypeError(f"identity takes no settings, got {sorted(settings)}")
    return Identity()
