"""The seed of one model request: the same in every process, different for every call.

Contract: `request_seed(run_seed, *parts)` is a 31-bit seed derived by SHA-256 from the run seed
and the call's identity (problem, agent, turn; a sample's index), so reruns send the same seeds
and replicas differ. It imports nothing heavy: records and reports use it too.
"""

from __future__ import annotations

import hashlib


def request_seed(run_seed: int, *parts: object) -> int:
    """A stable 31-bit seed from the run seed and the call's identity."""
    key = "\x1f".join(str(p) for p in (run_seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF
