"""Answers one team run takes from another run of the same team on the same row: the reuse of
intermediate outputs behind hivemind's DAG-Shapley (an agent that reads what it read in the
whole team's run sends the same request, so it gets the answer that run got).

Contract:
- `SharedAnswers(store, scope=..., writes=...)` is one rollout's view of a `ResponseCache`
  (`lcb.agents.cache`), under the gateway's key (the whole request: model, messages, tools,
  sampling, request seed, purpose and agent) prefixed by `scope`, the rollout's run seed: with
  request seeds off, the key alone would not tell two iterations of a row apart.
- `ModelGateway.call(..., shared=view)` asks `view.answer(key)` first: a stored reply comes
  back without a request and without a response-cache lookup (counted in `reused`, its usage
  in `reused_usage`). Every other call is counted in `fresh` before it is sent or looked up in
  the response cache, whether it is then answered or fails: a request that went out costs the
  run, and what a run costs must not depend on `--cache`.
- A view that `writes` (the whole team's run) never takes an answer. It keeps the answers of
  the current try (`begin_try()` forgets those of an earlier try that infrastructure lost) and
  stores them only at `commit()`, when that try became the rollout; a later commit of the same
  request replaces the earlier one (a rerun of a whole-team rollout the journal lost).
- A view made `only_reuse=True` never lets a call through: a call it cannot answer sets
  `missed` and fails at once (`ModelGateway` raises `CacheMiss`, sending nothing).
- `sent_nothing`: no fresh call over every try (every call reused, or none made at all).
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from lcb.agents.cache import CachedReply, ResponseCache


class SharedAnswers:
    """One rollout's view of the shared answers (see the module docstring)."""

    def __init__(self, store: ResponseCache, *, scope: str, writes: bool, model: str,
                 purpose: str, only_reuse: bool = False) -> None:
        if writes and only_reuse:
            raise ValueError("a view that only reuses answers cannot be the one that writes")
        self.store, self.scope = store, scope
        self.writes, self.only_reuse = writes, only_reuse
        self.model, self.purpose = model, purpose
        self.missed = False
        self.reused = self.fresh = 0
        self._usage = {"prompt_tokens": 0, "completion_tokens": 0, "n_calls_without_usage": 0}
        self._pending: dict[str, CachedReply] = {}

    def answer(self, key: str) -> CachedReply | None:
        """The reply stored under `key`, counted as reused; None when there is none (always,
        for a view that writes)."""
        stored = None if self.writes else self.store.get(self._key(key))
        if stored is not None:
            self.reused += 1
            usage = stored.usage or {}
            if not usage:
                self._usage["n_calls_without_usage"] += 1
            self._usage["prompt_tokens"] += int(usage.get("input_tokens") or 0)
            self._usage["completion_tokens"] += int(usage.get("output_tokens") or 0)
        return stored

    def sending(self) -> None:
        """A call this view did not answer: it goes to the response cache or the model."""
        self.fresh += 1

    def keep(self, key: str, reply: AIMessage) -> None:
        """The answer of a fresh call, stored at `commit()` when this view writes."""
        if self.writes:
            self._pending[self._key(key)] = CachedReply.of(reply)

    def begin_try(self) -> None:
        """A new try of the rollout: the answers of the one before are not its answers."""
        self._pending.clear()

    def commit(self) -> None:
        """The current try is the rollout: store its answers for the other views."""
        for key, reply in self._pending.items():
            self.store.put(key, reply, model=self.model, purpose=self.purpose, replace=True)
        self._pending.clear()

    @property
    def sent_nothing(self) -> bool:
        return self.fresh == 0

    @property
    def reused_usage(self) -> dict[str, int]:
        """The reused calls, their known tokens and how many of them reported no usage."""
        return {"calls": self.reused, **self._usage}

    def _key(self, key: str) -> str:
        return f"{self.scope}:{key}"
