"""`tavo`'s credit step (steps 2-5 of a round): sub-trajectories, their judgments, each
agent's credit with its editing instructions, and the edits merged per role.

Contract:
- `split_transcript(transcript, topology=...)` cuts a run into sub-trajectories (system and
  user messages are inputs, left out). Centralized: one per manager turn: the manager's
  message, then the runs of the workers it delegated to in that turn, then the tool replies
  the manager got. Other teams (and a centralized run without a manager turn): one per agent
  turn plus the tool replies after it.
- `Credit(settings, ctx, chain, evidence).edits_by_role(runs)`: one judge call per
  sub-trajectory (`tavo:subtraj`), one per (task, agent that took a turn) (`tavo:agent`),
  then per role one merge call (`tavo:merge`, reflect) over the edits of every agent holding
  it, at most `merge_sources` edit sets (the lowest credit first), with `merge_fallback` when
  the reply is unusable. It reads the team's facts and makes uncharged model calls only:
  it charges nothing. What it found goes into `evidence` (step and agent credit, each
  (task, agent) credit with its edits before the merge, the merged edits, how each merge
  went).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lcb.agents.usage import WITHOUT_USAGE
from lcb.data.problems import Problem
from lcb.optimize.graph import STEP_KEYS, invocations
from lcb.optimize.method import Bundle, Rollout, Uncharged
from lcb.optimize.methods import tavo_prompts as tp
from lcb.optimize.methods.tavo_parts import merge_fallback, pick_sources
from lcb.registry import CENTRALIZED_MANAGER as MANAGER
from lcb.teams.layouts import DELEGATE_TOOL as TOOL
from lcb.text import clip

if TYPE_CHECKING:
    from lcb.optimize.methods.tavo import TavoSettings

@dataclass
class SubTrajectory:
    """One step of a run: the acting agent's turn and what belongs to it (`split_transcript`)."""

    agent: str
    role: str
    step: int | None
    entries: list[dict[str, Any]] = field(default_factory=list)


def _step_of(entry: Mapping[str, Any]) -> int | None:
    return next((entry[key] for key in STEP_KEYS if key in entry), None)


def _turns(entries: Sequence[Mapping[str, Any]]) -> list[SubTrajectory]:
    """One sub-trajectory per assistant message, with the tool replies that follow it."""
    steps: list[SubTrajectory] = []
    for entry in entries:
        if entry.get("type") == "assistant":
            steps.append(SubTrajectory(str(entry.get("source")), str(entry.get("role")),
                                       _step_of(entry), [dict(entry)]))
        elif entry.get("type") == "tool" and steps and steps[-1].agent == entry.get("source"):
            steps[-1].entries.append(dict(entry))
    return steps


def split_transcript(transcript: Sequence[Mapping[str, Any]], *,
                     topology: str) -> list[SubTrajectory]:
    """A run cut into sub-trajectories (system and user messages are inputs, left out).

    Centralized: one per manager turn: the manager's message, then the runs of the workers it
    delegated to in that turn (their messages and tool replies), then the tool replies the
    manager got. A worker run belongs to the turn whose `delegate` call names that worker
    with an instruction its user message holds (first unmatched call), else to the last
    manager turn. Other teams (and a centralized run without a manager turn): one per agent
    turn (assistant message) plus the tool replies after it.
    """
    manager = [e for e in transcript if e.get("source") == MANAGER]
    steps = _turns(manager) if topology == "centralized" else []
    if not steps:
        return _turns(transcript)
    pending = [[(str(c["args"].get("worker")), str(c["args"].get("instruction") or "").strip())
                for c in step.entries[0].get("tool_calls") or ()
                if c.get("name") == TOOL and not c.get("invalid") and isinstance(c.get("args"),
                                                                                  Mapping)]
               for step in steps]
    inserted = [1] * len(steps)  # where the next worker run goes: after the manager's message
    for run in invocations([e for e in transcript if e.get("source") != MANAGER]):
        home = _home(run, pending)
        kept = [dict(e) for e in run if e.get("type") in ("assistant", "tool")]
        steps[home].entries[inserted[home]:inserted[home]] = kept
        inserted[home] += len(kept)
    return steps


def _home(run: Sequence[Mapping[str, Any]], pending: list[list[tuple[str, str]]]) -> int:
    source = str(run[0].get("source"))
    asked = "\n".join(str(e.get("content") or "") for e in run if e.get("type") == "user")
    for index, calls in enumerate(pending):
        for position, (worker, instruction) in enumerate(calls):
            if worker == source and instruction and instruction in asked:
                del calls[position]
                return index
    return len(pending) - 1

@dataclass
class Credit:
    """Steps 2-5 of one round: sub-trajectory judgments, agent credit, merged edits per role."""

    settings: TavoSettings
    ctx: Uncharged
    chain: Bundle
    evidence: dict[str, Any]

    async def edits_by_role(self, runs: Sequence[tuple[Problem, Rollout]]) -> dict[str, tp.Edits]:
        s, ctx = self.settings, self.ctx
        splits = [split_transcript(r.team.transcript, topology=ctx.topology) for _, r in runs]
        asks = [self._step_prompt(p, r, steps, k) for (p, r), steps in zip(runs, splits,
                                                                           strict=True)
                for k in range(len(steps))]
        replies = await asyncio.gather(*(ctx.judge(a, purpose="tavo:subtraj",
                                                   temperature=s.subtraj_temperature)
                                         for a in asks))
        parsed = iter([tp.parse_step(reply) for reply in replies])
        judged = [[next(parsed) for _ in steps] for steps in splits]
        agents = [(i, agent, role) for i, (_, r) in enumerate(runs)
                  for agent, role in tp.actors(r.team.transcript).items()]
        credit_asks = [self._agent_prompt(runs[i], splits[i], judged[i], agent, role)
                       for i, agent, role in agents]
        answers = await asyncio.gather(*(ctx.judge(a, purpose="tavo:agent",
                                                   temperature=s.agent_temperature)
                                         for a in credit_asks))
        credits = [tp.parse_credit(answer) for answer in answers]
        self._note(runs, splits, judged, agents, credits)
        by_role: dict[str, list[tuple[float, str, tp.Edits]]] = {}
        for (i, agent, role), credit in zip(agents, credits, strict=True):
            if credit is not None and any(credit.edits.values()) and role in self.chain:
                by_role.setdefault(role, []).append(
                    (credit.score, f"run {i + 1}, agent {agent}, score {credit.score:g}",
                     credit.edits))
        self.evidence["sources"] = {role: [min(len(found), s.merge_sources), len(found)]
                                    for role, found in by_role.items()}
        merged = await asyncio.gather(*(self._merge(role, pick_sources(found, s.merge_sources))
                                        for role, found in by_role.items()))
        return dict(zip(by_role, merged, strict=True))

    def _step_prompt(self, problem: Problem, rollout: Rollout, steps: list[SubTrajectory],
                     k: int) -> str:
        s = self.settings
        earlier = tp.render_steps([st.entries for st in steps[:k]], clip_chars=s.clip_chars)
        current = tp.render_steps([steps[k].entries], clip_chars=s.clip_chars, first=k + 1)
        return tp.subtraj_prompt(
            topology=self.ctx.topology, task=clip(problem.statement, s.context_chars),
            outcome=tp.outcome_text(rollout.score, rollout.feedback, chars=s.clip_chars),
            earlier=clip(earlier, s.context_chars), step=clip(current, s.context_chars),
            actor=f"{steps[k].agent} (role {steps[k].role})", number=k + 1, total=len(steps))

    def _agent_prompt(self, run: tuple[Problem, Rollout], steps: list[SubTrajectory],
                      judged: list[tp.StepJudgment | None], agent: str, role: str) -> str:
        s, (problem, rollout) = self.settings, run
        transcript = rollout.team.transcript
        mine = [e for e in transcript if e.get("source") == agent]
        said = "\n".join(tp.render_entry(e, clip_chars=s.clip_chars) for e in mine
                         if e.get("type") == "assistant")
        counted = rollout.team.fields.get("usage_by_agent", {}).get(agent, {})
        tool_calls = sum(len(e.get("tool_calls") or ()) for e in mine)
        return tp.agent_prompt(
            topology=self.ctx.topology, agent=agent, role=role,
            task=clip(problem.statement, s.context_chars),
            outcome=tp.outcome_text(rollout.score, rollout.feedback, chars=s.clip_chars),
            step_scores=clip(tp.step_scores([(st.agent, j) for st, j in zip(
                steps, judged, strict=True)]), s.context_chars),
            prompt=self.chain.get(role, ""),
            asked=clip(tp.asked_of(transcript, agent), s.context_chars) or "(nothing)",
            said=clip(said, s.context_chars) or "(nothing)",
            usage=usage_text(counted, tool_calls=tool_calls))

    async def _merge(self, role: str, sources: list[tuple[str, tp.Edits]]) -> tp.Edits:
        s = self.settings
        reply = await self.ctx.reflect(tp.merge_prompt(role=role, sources=sources, caps=s.caps),
                                       purpose="tavo:merge", temperature=s.merge_temperature)
        data = tp.json_object(reply)
        merged = tp.parse_edits(data) if data is not None else None
        how = self.evidence.setdefault("merge", {})
        if merged is None or not any(merged.values()):
            how[role] = "fallback"
            merged = merge_fallback([e for _, e in sources], s.caps)
        else:
            how[role] = "llm"
            merged = {kind: merged[kind][:s.caps[kind]] for kind in tp.EDIT_KINDS}
        self.evidence.setdefault("edits", {})[role] = merged
        return merged

    def _note(self, runs: Sequence[tuple[Problem, Rollout]], splits: list[list[SubTrajectory]],
              judged: list[list[tp.StepJudgment | None]], agents: list[tuple[int, str, str]],
              credits: list[tp.AgentCredit | None]) -> None:
        steps: dict[str, list[float]] = {}
        for run_steps, run_judged in zip(splits, judged, strict=True):
            for step, judgment in zip(run_steps, run_judged, strict=True):
                if judgment is not None:
                    steps.setdefault(step.agent, []).append(sum(judgment.scores()) / 3)
        by_agent: dict[str, list[float]] = {}
        by_role: dict[str, list[float]] = {}
        for (_, agent, role), credit in zip(agents, credits, strict=True):
            if credit is not None:
                by_agent.setdefault(agent, []).append(credit.score)
                by_role.setdefault(role, []).append(credit.score)
        mean = {name: round(sum(v) / len(v), 3) for name, v in steps.items()}
        self.evidence["credit"] = [_credit_note(runs[i][0].id, agent, role, credit)
                                   for (i, agent, role), credit in zip(agents, credits,
                                                                       strict=True)]
        self.evidence.update(
            steps=mean, agents={a: round(sum(v) / len(v), 3) for a, v in by_agent.items()},
            roles={r: round(sum(v) / len(v), 3) for r, v in by_role.items()},
            unusable={"subtraj": sum(j is None for js in judged for j in js),
                      "agent": sum(c is None for c in credits)},
            calls={"subtraj": sum(map(len, splits)), "agent": len(agents)})


def _credit_note(task: str, agent: str, role: str, credit: tp.AgentCredit | None
                 ) -> dict[str, Any]:
    """One (task, agent) credit as the history shows it: clipped, the edits before merging."""
    note: dict[str, Any] = {"task": task, "agent": agent, "role": role}
    if credit is None:
        return {**note, "unusable": True}
    return {**note, "score": credit.score, "analysis": clip(credit.causal_analysis, 240),
            "edits": {k: [clip(item, 120) for item in v] for k, v in credit.edits.items() if v}}


def usage_text(counted: Mapping[str, Any], *, tool_calls: int) -> str:
    """An agent's usage as its prompt states it: `key value` pairs in key order. Tokens no
    server reported are "unknown" (`lcb.agents.usage`); a count of 0 calls without usage is
    left out, so a prompt over reported usage reads (and replays from the journal) as before.

    >>> usage_text({"prompt_tokens": None, "n_calls_without_usage": 1}, tool_calls=0)
    'n_calls_without_usage 1, prompt_tokens unknown, tool_calls 0'
    """
    usage = {key: "unknown" if value is None else value for key, value in counted.items()
             if value or key != WITHOUT_USAGE}
    usage["tool_calls"] = tool_calls
    return ", ".join(f"{key} {value}" for key, value in sorted(usage.items()))
