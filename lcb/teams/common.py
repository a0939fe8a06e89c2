"""Pieces every team shares: the batch-wide runtime, the per-problem context, the result.

Contract:
- `TeamRuntime` is built once per batch: the model gateway (request semaphore, retries, usage;
  see `lcb.agents.llm`), the `python_exec` tool with its bounded pool, batch-wide usage totals, and
  the seed role prompts (each file read once per batch).
- `TeamContext` is one team run on one problem: it tags every model call with the problem, the
  team, the agent's role and id and the turn, derives the request seed from the run seed and
  that identity, and counts usage in its own ledger (forwarded to the runtime's totals). Its
  `shared` view (`lcb.agents.shared`, None by default) answers the calls another run of the
  team on this row already made with the same request.
- `AgentSpec` describes one agent (id, role, system prompt, tools, turn cap); multi-agent teams
  make several from one role (`coder_0`, `coder_1`, ...) and run them with `lcb.teams.agent`.
- `TeamResult` is what a team returns; `TeamContext.result(...)` fills in the usage fields.
  When the run failed (`error` set) and every model call that failed was refused by the server
  as malformed or too long (HTTP 400/413/422, `ModelCallError.bad_request`), it sets
  `error_kind="bad_request"` and `server_message` (the first refusal's words): the request, not
  the infrastructure, was at fault. Any other failure leaves `error_kind` None.
- `TeamContext.result(...)` also says why the submitted answer ended, in `fields`:
  `finish_reason` and `truncated` of the assistant message the submitted program came from
  (else the one whose text is the final answer, else the latest one; None / False when no call
  answered), and `n_truncated_calls`, how many of the run's calls were cut at max_tokens.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool

from lcb.agents.cache import ResponseCache
from lcb.agents.llm import ModelCallError, ModelGateway, request_seed
from lcb.agents.models import ModelConfig
from lcb.agents.prompts import load_role_prompt, with_contract
from lcb.agents.shared import SharedAnswers
from lcb.agents.tools import make_python_exec
from lcb.agents.usage import CallTag, UsageLedger
from lcb.data.problems import Problem
from lcb.extract import extract_code

DEFAULT_MAX_TURNS = 8
ErrorKind = Literal["bad_request"]


@dataclass
class TeamResult:
    """The outcome of one team run. `error` marks a per-problem failure (em 0 in the record);
    `error_kind` / `server_message` say when the server refused the request (module doc).
    Token totals follow `lcb.agents.usage`'s rule: None when every answered call reported no
    usage, and `n_calls_without_usage` counts those calls."""

    code: str | None
    final_text: str
    transcript: list[dict]
    prompt_tokens: int | None
    completion_tokens: int | None
    n_llm_calls: int
    n_tool_calls: int
    usage_by_role: dict[str, dict]
    fields: dict
    error: str | None = None
    error_kind: ErrorKind | None = None
    server_message: str | None = None
    n_calls_without_usage: int = 0

    @classmethod
    def failed(cls, error: str) -> TeamResult:
        """A run that produced nothing and used nothing: no program, no usage, `error` set."""
        return cls(code=None, final_text="", transcript=[], prompt_tokens=0,
                   completion_tokens=0, n_llm_calls=0, n_tool_calls=0, usage_by_role={},
                   fields={}, error=error)


@dataclass(frozen=True)
class AgentSpec:
    """One agent: `agent` is its id (the transcript's source tag), `role` its prompt slot (the
    usage key); `system_prompt` already carries the output contract; `max_turns` caps model
    calls."""

    agent: str
    role: str
    system_prompt: str
    tools: tuple[BaseTool, ...] = ()
    max_turns: int = DEFAULT_MAX_TURNS

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"AgentSpec {self.agent!r}: max_turns must be >= 1")


def submitted_entry(transcript: Sequence[dict], code: str | None,
                    final_text: str) -> dict | None:
    """The latest assistant entry holding the submitted program, else the latest whose text is
    the final answer, else the latest assistant entry (None when there is none)."""
    answers = [e for e in reversed(transcript) if e.get("type") == "assistant"]
    by_code = (e for e in answers if code is not None and extract_code(e["content"]) == code)
    by_text = (e for e in answers if final_text and e["content"] == final_text)
    return next(by_code, None) or next(by_text, None) or next(iter(answers), None)


def ending_fields(transcript: Sequence[dict], code: str | None, final_text: str,
                  ledger: UsageLedger) -> dict[str, Any]:
    """`finish_reason`, `truncated`, `n_truncated_calls` (see the module docstring)."""
    entry = submitted_entry(transcript, code, final_text) or {}
    return {"finish_reason": entry.get("finish_reason"),
            "truncated": bool(entry.get("truncated")),
            "n_truncated_calls": sum(1 for call in ledger.calls if call.truncated)}


class TeamRuntime:
    """Shared by every problem of a batch, within one event loop (`aclose()` it there).

    `python_exec` replaces the default (tests); `exec_workers` caps concurrent
    code runs (never above the CPU count); `sandbox` is the tier `python_exec` runs in (the
    run's `--sandbox`, as for grading). `cache` (a `lcb.agents.cache.ResponseCache`, closed by
    `aclose`) answers stored calls; `purpose` names this runtime's calls in its keys (batch,
    optimize, validate, test)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        exec_workers: int | None = None,
        python_exec: BaseTool | None = None,
        sandbox: str = "process",
        cache: ResponseCache | None = None,
        purpose: str = "batch",
    ):
        cores = os.cpu_count() or 1
        self.config, self.cache = config, cache
        self.gateway = ModelGateway(config, cache=cache, purpose=purpose)
        self._own_tool = python_exec is None
        workers = min(exec_workers or cores, cores)
        self.python_exec = python_exec or make_python_exec(workers=workers, sandbox=sandbox)
        self.usage = UsageLedger(keep_calls=False)
        self._seed_prompts: dict[tuple[str, str], str] = {}

    def seed_prompt(self, team: str, role: str) -> str:
        """`role`'s seed prompt file of `team`, read once per batch: every problem of a batch
        sees the same text, even if the file changes while the batch runs."""
        key = (team, role)
        if key not in self._seed_prompts:
            self._seed_prompts[key] = load_role_prompt(team, role)
        return self._seed_prompts[key]

    async def aclose(self) -> None:
        """Close the HTTP client and stop the code-run pool (when the runtime made it)."""
        await self.gateway.aclose()
        if self.cache is not None:
            self.cache.close()
        if self._own_tool:
            self.python_exec.metadata["close"]()


@dataclass
class TeamContext:
    """One team run on one problem (see the module docstring)."""

    problem: Problem
    team: str
    runtime: TeamRuntime
    seed: int = 0
    sample: int = 0  # the sample index (part of the response-cache key)
    shared: SharedAnswers | None = None  # answers of another run of this team on this row
    ledger: UsageLedger = field(init=False)
    call_errors: list[ModelCallError] = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = UsageLedger(parent=self.runtime.usage)
        self.call_errors = []

    def request_seed(self, agent: str, turn: int) -> int | None:
        """The seed sent with `agent`'s call at `turn`; None when the config sends no seeds."""
        base = self.runtime.config.seed
        if base is None:
            return None
        return request_seed(self.seed, base, self.problem.id, agent, turn)

    async def ask(
        self, spec: AgentSpec, messages: Sequence[BaseMessage], *, turn: int
    ) -> AIMessage:
        """One model call for `spec` at `turn`, through the runtime's gateway."""
        tag = CallTag(self.problem.id, self.team, spec.role, spec.agent, turn)
        try:
            return await self.runtime.gateway.call(
                messages, tag=tag, ledger=self.ledger, tools=spec.tools,
                seed=self.request_seed(spec.agent, turn), sample=self.sample,
                shared=self.shared,
            )
        except ModelCallError as err:
            self.call_errors.append(err)  # the agent loop keeps only the text; the kind is here
            raise

    def system_prompt(self, role: str, bundle: Mapping[str, str] | None = None) -> str:
        """`role`'s prompt (from `bundle`, else the seed file of this team) + output contract."""
        text = (bundle or {}).get(role) or self.runtime.seed_prompt(self.team, role)
        return with_contract(text, mode=self.problem.mode, fn_name=self.problem.fn_name)

    def result(
        self,
        *,
        code: str | None,
        final_text: str,
        transcript: list[dict],
        fields: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> TeamResult:
        """A `TeamResult` whose usage fields come from this run's ledger (and, for a failed
        run, the kind of failure from its failed model calls)."""
        total = self.ledger.total()
        shown = total.to_record()  # tokens: None when no call reported usage
        refused = bool(error) and bool(self.call_errors) and all(
            err.bad_request for err in self.call_errors)
        return TeamResult(
            code=code,
            final_text=final_text,
            transcript=transcript,
            prompt_tokens=shown["prompt_tokens"],
            completion_tokens=shown["completion_tokens"],
            n_llm_calls=total.n_llm_calls,
            n_tool_calls=total.n_tool_calls,
            n_calls_without_usage=total.n_calls_without_usage,
            usage_by_role=self.ledger.by_role(),
            fields={**(fields or {}),
                    **ending_fields(transcript, code, final_text, self.ledger)},
            error=error,
            error_kind="bad_request" if refused else None,
            server_message=self.call_errors[0].server_message if refused else None,
        )
