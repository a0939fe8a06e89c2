"""The judge's entry point and its request handler: what a grading request means to a judge.

A slot starts its judge as `python -s -S -c '…main(peer_fd, cpu)'` with this module's `main`
(the pool hands it to the slot: `lcb.sandbox.slot.Slot.start(sandbox, judge=main)`). `main`
runs the sandbox's serve loop (`lcb.sandbox.judge.serve`: the pipe to the pool, the zygote's
socket, the process's own hardening) with `handle` as the handler of each request:
- `{"kind": "default", ...}`: `default.run_default` (the stdin or functional mode driver);
- `{"kind": "official", ...}`: `default.run_official` around `official.judge_official`.
Any other kind raises ValueError (that request's answer is `ok: false`).
"""

from __future__ import annotations

from typing import Any, NoReturn

from lcb.grading import default, official
from lcb.sandbox.judge import Zygote, serve


def handle(zygote: Zygote, request: dict) -> Any:
    """The plain-data `run` of one request (see the module docstring)."""
    kind = request.get("kind")
    if kind == "default":
        return default.run_default(zygote, request)
    if kind == "official":
        return default.run_official(zygote, request, official.judge_official)
    raise ValueError(f"unknown request kind {kind!r}")


def main(peer_fd: int, cpu: int | None = None) -> NoReturn:
    """Serve the pool's requests until it closes the pipe (pinned to `cpu` if given)."""
    serve(peer_fd, cpu, handle)
