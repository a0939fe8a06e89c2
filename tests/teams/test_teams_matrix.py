"""Every multi-agent team at every size and format, end to end on the bundled sample set.

One scripted server and one runtime serve all 48 runs concurrently (zero latency). Each agent
answers with a report in the run's format and the reference solution of its problem; a
centralized manager first delegates to its first worker. The submitted programs are graded.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from lcb.data.datasets import load_problems
from lcb.data.samples import reference_solution
from lcb.extract import extract_code
from lcb.grading import GradingPool
from lcb.teams.centralized import MANAGER, TOOL
from lcb.teams.formats import CommFormat
from lcb.teams.layouts import TEAM_SIZES, team_layout
from lcb.teams.options import TeamOptions
from tests.helpers_agents import make_runtime
from tests.helpers_teams import TOPOLOGIES, fenced, report, run_team, system_text, user_text
from tests.scripted_server import Reply, ToolCall, assistant_turns, scripted_server

COMBOS = list(itertools.product(TOPOLOGIES, TEAM_SIZES, CommFormat))
MANAGER_OPENING = "You are the manager"


@pytest.fixture(scope="module")
def problems():
    return load_problems("sample").problems


def make_script(problems, fmt_of):
    def script(request):
        user = user_text(request)
        problem = next(p for p in problems if p.statement in user)
        fmt = fmt_of[problem.id]
        if system_text(request).startswith(MANAGER_OPENING) and assistant_turns(request) == 0:
            worker = system_text(request).split("Your workers:\n- ", 1)[1].split(":")[0]
            return Reply.calls(ToolCall(TOOL, {"worker": worker, "instruction": "solve it"}))
        return report(fmt) + fenced(reference_solution(problem.id))

    return script


@pytest.mark.slow
def test_all_teams_sizes_and_formats_run_end_to_end(problems):
    # one problem per combination (sample problems reused across rounds of 14)
    plan = [(combo, problems[i % len(problems)]) for i, combo in enumerate(COMBOS)]
    rounds = [plan[i:i + len(problems)] for i in range(0, len(plan), len(problems))]
    results = []
    for batch in rounds:  # a problem appears once per batch, so the script can tell runs apart
        fmt_of = {problem.id: fmt for (_, _, fmt), problem in batch}
        with scripted_server(make_script(problems, fmt_of)) as server:
            runtime = make_runtime(server.base_url)

            async def main(batch=batch, runtime=runtime):
                try:
                    return await asyncio.gather(*(
                        run_team(runtime, topology, problem,
                                 options=TeamOptions(team_size=size, communication=fmt))
                        for (topology, size, fmt), problem in batch))
                finally:
                    await runtime.aclose()

            results += zip(batch, asyncio.run(main()), strict=True)
            assert not server.script_errors
    submitted = {(problem, result.code) for (_, problem), result in results if result.code}
    with GradingPool(2) as pool:  # each distinct submitted program once
        grades = {key: pool.grade_sync(*key) for key in submitted}
    assert len(grades) == len(problems) and all(g.em == 1 for g in grades.values())
    for ((topology, size, fmt), problem), result in results:
        label = f"{topology} r={size} {fmt}"
        assert result.error is None, label
        assert result.code == extract_code(fenced(reference_solution(problem.id))), label
        expected = team_layout(topology, size).ids
        ran = result.fields["agents_ran"]
        if topology == "centralized":
            assert ran == [MANAGER, expected[1]], label
        else:
            assert ran == list(expected), label
        assert result.fields["compliance"]["share"] == 1.0, label
        assert result.fields["team_size"] == size and result.fields["communication"] == fmt
        assert result.n_llm_calls == sum(u["n_llm_calls"] for u in result.usage_by_role.values())
