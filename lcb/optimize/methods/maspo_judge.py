"""What `maspo` asks the models about one role: a child's proposal, and its pairwise reward
against its parent. It reads the team and makes uncharged calls only (`Uncharged`).

Contract:
- `lookahead_mode(graph, role)`: what the lookahead term judges for `role`: a role with
  successor roles is judged on their outputs (`children`: a chain stage, a star manager); a
  star worker and a shared role on the team's final answer (`final`); the last stage of a
  chain (its output is the answer) takes the global value (`global`).
- `RoleJudge(ctx, settings)`:
  - `propose(role, current, part)`: one reflection call (purpose `maspo:propose:<role>`,
    T = `temperature`) whose prompt (`proposal_prompt`) shows the slice `part` of a
    minibatch: each run's outcome, the grader's feedback on a failure, and the role's input
    and output (`Rollout.role_io`); `place(role)` says where the role sits in the team.
  - `score(role, kept, runs)`: per row that both the parent (`kept`) and the child (`runs`)
    ran, pairwise judge calls (T = 0; `maspo_prompts`) that see the two versions' inputs and
    outputs, never their instruction texts: reward = mean over rows of 0.4·local +
    0.4·lookahead + 0.2·global − 0.5. The child side is B on even rows, A on odd ones
    (against position bias). Returns (scores, evidence), None when no child rollout came
    back; `evidence["misaligned"]` lists the rows where the child was judged locally better
    but the team's program failed (the search mines them), `evidence["gain"]` the child's
    passes minus the parent's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from lcb.agents.prompts import placeholders_in
from lcb.data.problems import Problem
from lcb.optimize.method import Rollout, Uncharged
from lcb.optimize.methods import maspo_prompts as mp
from lcb.text import clip

if TYPE_CHECKING:
    from lcb.optimize.graph import TeamGraph
    from lcb.optimize.methods.maspo import MaspoSettings

KEY = "maspo"
Lookahead = Literal["children", "final", "global"]


def lookahead_mode(graph: TeamGraph, role: str) -> Lookahead:
    """What the lookahead term judges for `role` (module docstring)."""
    if graph.kind == "shared":
        return "final"
    if graph.children(role):
        return "children"
    return "final" if graph.kind == "star" else "global"


class RoleJudge:
    """The proposal and reward calls of one maspo run (module docstring)."""

    def __init__(self, ctx: Uncharged, settings: MaspoSettings) -> None:
        self.ctx, self.s, self.graph = ctx, settings, ctx.graph

    async def propose(self, role: str, current: str,
                      part: Sequence[tuple[Problem, Rollout]]) -> str:
        """The reflection model's reply proposing one child text of `role` from `part`."""
        return await self.ctx.reflect(self.proposal_prompt(role, current, part),
                                      purpose=f"{KEY}:propose:{role}",
                                      temperature=self.s.temperature)

    async def score(self, role: str, kept: list[tuple[Problem, Rollout]],
                    runs: Sequence[Rollout | None]
                    ) -> tuple[dict[str, float], dict[str, object]] | None:
        """The reward terms of a child against its parent, row by row (module docstring);
        None when no rollout of the child came back."""
        mode = lookahead_mode(self.graph, role)
        items = [(i, row, ran, run) for i, ((row, ran), run) in enumerate(zip(kept, runs,
                                                                            strict=True))
                 if run is not None]
        if not items:
            return None
        questions = [mp.Question.LOCAL] + ([] if mode == "global" else [mp.Question.LOOKAHEAD])
        asked = []
        for i, _, ran, run in items:
            child_side = "B" if i % 2 == 0 else "A"
            sides = [ran, run] if child_side == "B" else [run, ran]
            asked += [self.verdict(question, role, sides) for question in questions]
        verdicts = list(await asyncio.gather(*asked))
        rows: list[dict[str, float]] = []
        misaligned = []
        for index, (i, row, ran, run) in enumerate(items):
            child_side = "B" if i % 2 == 0 else "A"
            mine = verdicts[index * len(questions):(index + 1) * len(questions)]
            glob = mp.metric_value(run.score, ran.score)
            local = mp.pairwise_value(mine[0], child_side=child_side)
            look = glob if mode == "global" else mp.pairwise_value(mine[1], child_side=child_side)
            rows.append({"local": local, "lookahead": look, "global": glob,
                         "reward": mp.item_reward(local, look, glob)})
            if local == mp.VALUES["child"] and not run.passed:
                misaligned.append(row.id)
        scores = {name: sum(r[name] for r in rows) / len(rows)
                  for name in ("reward", "local", "lookahead", "global")}
        scores |= {"parent": sum(ran.score for _, _, ran, _ in items) / len(items),
                   "child": sum(run.score for _, _, _, run in items) / len(items)}
        gain = round(sum(run.score - ran.score for _, _, ran, run in items))
        evidence: dict[str, object] = {
            "lookahead_mode": mode, "per_row": rows, "gain": gain, "misaligned": misaligned,
            "unparsed_verdicts": sum(v is None for v in verdicts)}
        return scores, evidence

    async def verdict(self, question: mp.Question, role: str,
                      sides: Sequence[Rollout]) -> str | None:
        """One pairwise verdict; the judge sees each side's inputs and outputs, never its
        instruction text (so a text cannot win by praising itself)."""
        shown = [self.shown(question, role, run) for run in sides]
        prompt = mp.judge_prompt(question, topology=self.ctx.topology, role=role, sides=shown)
        reply = await self.ctx.judge(prompt, purpose=f"{KEY}:{question}:{role}", temperature=0.0)
        return mp.parse_verdict(reply)

    def shown(self, question: mp.Question, role: str, run: Rollout) -> dict[str, str]:
        """What a judge sees of one version: the role's turns, or what followed them."""
        turns = run.role_io
        render = {"limit": self.s.turns_per_sample, "chars": self.s.clip_chars}
        if question is mp.Question.LOCAL:
            return mp.render_turns(turns.get(role, []), **render)
        if lookahead_mode(self.graph, role) == "children":
            return {f"{child} — {key}": value for child in self.graph.children(role)
                    for key, value in mp.render_turns(turns.get(child, []), **render).items()}
        answer = run.team.final_text or run.team.code or ""
        return {"The team's final answer": clip(answer, self.s.clip_chars) or "(no answer)"}

    def proposal_prompt(self, role: str, current: str,
                        part: Sequence[tuple[Problem, Rollout]]) -> str:
        chars = self.s.clip_chars
        samples = []
        for row, run in part:
            sample = {"outcome": mp.PASSED if run.passed else mp.FAILED,
                      "Problem": clip(row.statement, chars)}
            if not run.passed:
                sample["Grader feedback"] = clip(run.feedback, chars) or "(none)"
            sample |= mp.render_turns(run.role_io.get(role, []),
                                      limit=self.s.turns_per_sample, chars=chars)
            samples.append(sample)
        return mp.proposal_prompt(topology=self.ctx.topology, role=role, place=self.place(role),
                                  current=current, samples=samples,
                                  placeholders=sorted(placeholders_in(self.ctx.seed_bundle[role])))

    def place(self, role: str) -> str:
        if self.graph.kind == "shared":
            return "Every agent of the team holds these same instructions."
        parents, children = self.graph.parents(role), self.graph.children(role)
        reads = f"It reads the output of {', '.join(parents)}. " if parents else ""
        feeds = (f"Its output is read by {', '.join(children)}." if children
                 else "Its output goes back to the manager, who answers for the team."
                 if self.graph.kind == "star" else "Its output is the team's answer.")
        return reads + feeds
