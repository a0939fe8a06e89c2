"""Answers one team run takes from another run of the same team on the same row: the reuse of
intermediate outputs behind hivemind's DAG-Shapley (an agent that reads what it read in the
whole team's run sends the same request, so it gets the answer that run got).

Contract:
- `SharedAnswers(store, writes=...)` is one run's view of a `ResponseCache`
  (`lcb.agents.cache`: keyed by the whole request: model, messages, tools, sampling, request
  seed, purpose and agent). `ModelGateway.call(..., shared=view)` asks `view.answer(key)`
  first: a stored reply comes back without a request and without a response-cache lookup
  (counted in `reused`, its tokens in `reused_usage`). Every other call (sent, or answered by
  the response cache, which must not change what a run costs) is counted in `fresh` and, when
  the view `writes`, stored for later views (`keep`). A view that writes never takes an
  answer: the run it serves costs what it sends, whatever an earlier session stored.
- `sent_nothing`: the run made no fresh call (every call reused, or none made at all).
- A view made `only_reuse=True` never lets a call through: a call it cannot answer sets
  `missed` and fails at once (`ModelGateway` raises `CacheMiss`, sending nothing), so a run
  expected to need no request costs nothing even when the expectation is wrong.
- A view belongs to one attempt of one run; its store is shared by every view of the job.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage

from lcb.agents.cache import CachedReply, ResponseCache


class SharedAnswers:
    """One run's view of the shared answers (see the module docstring)."""

    def __init__(self, store: ResponseCache, *, writes: bool, model: str, purpose: str,
                 only_reuse: bool = False) -> None:
        if writes and only_reuse:
            raise ValueError("a view that only reuses answers cannot be the one that writes")
        self.store, self.writes, self.only_reuse = store, writes, only_reuse
        self.missed = False
        self.model, self.purpose = model, purpose
        self.reused = 0
        self.fresh = 0
        self._tokens: dict[str, int | None] = {"prompt_tokens": 0, "completion_tokens": 0}

    def answer(self, key: str) -> CachedReply | None:
        """The reply stored under `key`, counted as reused; None when there is none, and
        always None for a view that writes (the run whose answers the others take)."""
        stored = None if self.writes else self.store.get(key)
        if stored is not None:
            self.reused += 1
            for name, value in _tokens_of(stored).items():
                known = self._tokens[name]
                self._tokens[name] = None if known is None or value is None else known + value
        return stored

    def keep(self, key: str, reply: AIMessage) -> None:
        """Count a fresh call; store its reply when this view writes."""
        self.fresh += 1
        if self.writes:
            self.store.put(key, CachedReply.of(reply), model=self.model, purpose=self.purpose)

    @property
    def sent_nothing(self) -> bool:
        return self.fresh == 0

    @property
    def reused_usage(self) -> dict[str, int | None]:
        """The reused calls and their tokens (None: a reply without usage among them)."""
        return {"calls": self.reused, **self._tokens}


def _tokens_of(reply: CachedReply) -> dict[str, int | None]:
    usage = reply.usage or {}
    return {"prompt_tokens": usage.get("input_tokens") if usage else None,
            "completion_tokens": usage.get("output_tokens") if usage else None}
