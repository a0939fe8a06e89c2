"""Shared pytest configuration. Helpers live in tests/helpers_*.py and are imported explicitly;
the one fixture here is shared by the hub tests."""

import pytest


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty HF cache in tmp, offline, so no test can reach the network and the hub loaders
    read hub-format local files (`tests.helpers_data.make_hub_cache`)."""
    from huggingface_hub import constants

    from lcb.data.hub import REVISION_ENV

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv(REVISION_ENV, raising=False)
    return cache
