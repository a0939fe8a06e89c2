"""Our agent loop: a small LangGraph graph, model node -> tool node -> model node ... -> END.

Contract:
- The model node makes one call through `TeamContext.ask` (gateway: semaphore, retries, usage,
  think-stripping). The loop ends when the model answers without tool calls, when it has made
  `spec.max_turns` calls, or when a call fails for good. That failure, or any crash inside the
  loop, sets `AgentRun.error`: it is data, never an exception, so sibling agents in a fan-out
  keep running. Only cancellation propagates.
- The tool node answers every tool call of the last message with one `ToolMessage`, in order:
  the tool's output; an error text for arguments that are not valid JSON
  (`AIMessage.invalid_tool_calls`), for an unknown tool name, and for a tool that raised. The
  model sees those errors on its next turn and can recover.
- `AgentRun.code` is the program of the final answer; when the turn cap cut the loop short (or
  a call failed) it is the last program found in any assistant message instead.
- `AgentRun.transcript()` gives source-tagged message dicts (see `message_record`).
"""

from __future__ import annotations

import asyncio
import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from lcb.agents.llm import TRUNCATED, ModelCallError
from lcb.extract import extract_code
from lcb.teams.common import AgentSpec, TeamContext
from lcb.text import ELLIPSIS, HEAD_ONLY, clip

ERROR_CLIP = 300


class AgentState(TypedDict):
    messages: Annotated[list[BaseMessage], operator.add]
    turns: int
    error: str | None


@dataclass(frozen=True)
class AgentRun:
    """What one agent did: its whole conversation and the outcome."""

    agent: str
    role: str
    messages: tuple[BaseMessage, ...]
    final_text: str
    code: str | None
    turns: int
    hit_turn_cap: bool
    error: str | None

    def transcript(self) -> list[dict[str, Any]]:
        return [message_record(m, source=self.agent, role=self.role) for m in self.messages]


def _clip(text: str) -> str:
    return clip(text, ERROR_CLIP, head=HEAD_ONLY, note=ELLIPSIS)


async def _answer_tool_call(call: dict[str, Any], tools: dict[str, BaseTool]) -> ToolMessage:
    name, call_id = call.get("name") or "", call.get("id") or ""
    tool = tools.get(name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        text = f"error: there is no tool named {name!r}; available tools: {known}."
        return ToolMessage(text, tool_call_id=call_id, name=name, status="error")
    try:
        output = await tool.ainvoke(call.get("args") or {})
    except Exception as err:  # noqa: BLE001 - a tool failure is a message, never a crash
        text = f"error: {name} failed: {type(err).__name__}: {_clip(str(err))}"
        return ToolMessage(text, tool_call_id=call_id, name=name, status="error")
    return ToolMessage(str(output), tool_call_id=call_id, name=name)


def _invalid_call_message(call: dict[str, Any]) -> ToolMessage:
    name = call.get("name") or ""
    text = (f"error: the arguments of your {name or 'tool'} call are not valid JSON "
            f"({_clip(str(call.get('args')))!r}). Send the arguments as one JSON object, "
            'for example {"code": "print(1)", "stdin": ""}.')
    return ToolMessage(text, tool_call_id=call.get("id") or "", name=name, status="error")


async def run_tool_calls(message: AIMessage, tools: Sequence[BaseTool]) -> list[ToolMessage]:
    """One reply per tool call of `message` (valid ones run concurrently), invalid ones last
    in the order the model sent them; never raises."""
    by_name = {t.name: t for t in tools}
    answered = await asyncio.gather(*(_answer_tool_call(c, by_name) for c in message.tool_calls))
    return [*answered, *(_invalid_call_message(c) for c in message.invalid_tool_calls)]


def _wants_tools(message: BaseMessage) -> bool:
    return isinstance(message, AIMessage) and bool(message.tool_calls or message.invalid_tool_calls)


@dataclass(frozen=True)
class AgentBinding:
    """The agent a run of the loop belongs to: LangGraph's run context (`Runtime.context`)."""

    spec: AgentSpec
    ctx: TeamContext


async def _model_node(state: AgentState, runtime: Runtime[AgentBinding]) -> dict[str, Any]:
    spec, ctx = runtime.context.spec, runtime.context.ctx
    turn = state["turns"] + 1
    try:
        reply = await ctx.ask(spec, state["messages"], turn=turn)
    except ModelCallError as err:
        return {"turns": turn, "error": str(err)}
    return {"turns": turn, "messages": [reply]}


async def _tool_node(state: AgentState, runtime: Runtime[AgentBinding]) -> dict[str, Any]:
    spec, ctx = runtime.context.spec, runtime.context.ctx
    last = state["messages"][-1]
    if not isinstance(last, AIMessage):  # unreachable through `_route`; keeps types honest
        return {}
    replies = await run_tool_calls(last, spec.tools)
    ctx.ledger.add_tool_calls(spec.role, len(replies))
    return {"messages": replies}


def _route(state: AgentState, runtime: Runtime[AgentBinding]) -> str:
    if state["error"] or state["turns"] >= runtime.context.spec.max_turns:
        return END
    return "tools" if _wants_tools(state["messages"][-1]) else END


def build_agent_graph() -> StateGraph:
    """The uncompiled loop graph (state: `AgentState`). It is the same for every agent: the
    agent comes with each run, as its `AgentBinding` context."""
    graph = StateGraph(AgentState, context_schema=AgentBinding)
    graph.add_node("model", _model_node)
    graph.add_node("tools", _tool_node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph


@functools.cache
def agent_loop() -> CompiledStateGraph:
    """The loop, compiled once per process and shared by all runs: building and compiling it
    costs ~2 ms of CPU, which every agent run of a batch would otherwise pay on the one event
    loop."""
    return build_agent_graph().compile()


def last_program(messages: Sequence[BaseMessage]) -> str | None:
    """The program of the latest assistant message that holds one."""
    for message in reversed(messages):
        if isinstance(message, AIMessage) and isinstance(message.content, str):
            code = extract_code(message.content)
            if code is not None:
                return code
    return None


async def run_agent(
    spec: AgentSpec, ctx: TeamContext, *, user: str | Sequence[BaseMessage]
) -> AgentRun:
    """Run `spec`'s loop on `user` (the user prompt, or messages after the system prompt)."""
    opening = [HumanMessage(user)] if isinstance(user, str) else list(user)
    state: AgentState = {"messages": [SystemMessage(spec.system_prompt), *opening],
                         "turns": 0, "error": None}
    try:
        final = await agent_loop().ainvoke(
            state, config={"recursion_limit": 2 * spec.max_turns + 4},
            context=AgentBinding(spec, ctx))
    except Exception as err:  # noqa: BLE001 - a crash is this agent's result, not its siblings'
        error = f"agent {spec.agent!r} crashed: {type(err).__name__}: {_clip(str(err))}"
        final = {**state, "error": error}
    messages = tuple(final["messages"])
    last = messages[-1]
    answered = isinstance(last, AIMessage) and not _wants_tools(last) and not final["error"]
    final_text = last.text if isinstance(last, AIMessage) else ""
    code = extract_code(final_text) if answered else last_program(messages)
    return AgentRun(
        agent=spec.agent, role=spec.role, messages=messages, final_text=final_text, code=code,
        turns=final["turns"], hit_turn_cap=not answered and not final["error"],
        error=final["error"],
    )


_TYPES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def message_record(message: BaseMessage, *, source: str, role: str) -> dict[str, Any]:
    """A JSON-able transcript entry: `source` (the agent id), `role` (its prompt slot), `type`
    (system|user|assistant|tool), `content`; assistant entries add `tool_calls`, `usage`, `call`
    (attempts, latency, seed, reasoning tokens, ...), `finish_reason` (the server's, None when
    unknown) and `truncated` (the answer was cut at max_tokens: finish_reason "length"); tool
    entries add `tool_call_id`, `name`, `status`."""
    record: dict[str, Any] = {
        "source": source,
        "role": role,
        "type": _TYPES.get(message.type, message.type),
        "content": message.content if isinstance(message.content, str) else message.text,
    }
    if isinstance(message, AIMessage):
        record["tool_calls"] = [
            *({"id": c["id"], "name": c["name"], "args": c["args"]} for c in message.tool_calls),
            *({"id": c["id"], "name": c["name"], "args": c["args"], "invalid": True}
              for c in message.invalid_tool_calls),
        ]
        record["usage"] = dict(message.usage_metadata or {})
        record["call"] = message.response_metadata.get("lcb", {})
        finish = message.response_metadata.get("finish_reason")
        record["finish_reason"] = finish if isinstance(finish, str) else None
        record["truncated"] = finish == TRUNCATED
    if isinstance(message, ToolMessage):
        record.update(tool_call_id=message.tool_call_id, name=message.name, status=message.status)
    return record
