"""The optimize phase's journal and replay: rollouts, uncharged calls, history, checkpoints.

Against the scripted server with the real client, team and grader: a resumed context answers
from the journal without sending a request, counts each journaled rollout once, and a replay
in the same process is free.
"""

import asyncio
import gzip
import json

import pytest

from lcb.optimize.artifacts import HistoryEntry, read_history
from lcb.optimize.calls import CALLS_LOG, CallJournal, _read_calls
from lcb.optimize.journal import ROLLOUT_LOG, HistoryLog, RolloutJournal
from tests.helpers_optimize import TeamModel, job_context, marker, sample_problems, sample_splits
from tests.scripted_server import Reply, keyed, message_text, scripted_fixture  # noqa: F401

SPLITS = sample_splits()
BY_ID = {p.id: p for p in sample_problems()}
TRAIN = [BY_ID[i] for i in SPLITS.train]


def team_requests(server, problem):
    return [r for r in server.chat_requests() if marker(problem) in message_text(r)]


def test_a_journaled_rollout_comes_back_whole_and_a_repeat_is_a_free_replay(scripted, tmp_path):
    wrong = TRAIN[1]
    server = scripted(TeamModel(sample_problems(), wrong=frozenset({wrong.id})))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            first = await ctx.rollout(ctx.seed_bundle, wrong, iteration=2)
            again = await ctx.rollout(ctx.seed_bundle, wrong, iteration=2)
            other = await ctx.rollout(ctx.seed_bundle, wrong, iteration=3)  # new seeds: runs
            return first, again, other, ctx.ledger.charged, ctx.replays

    first, again, other, charged, replays = asyncio.run(main())
    assert (first.replay, again.replay, other.replay) == (False, True, False)
    assert (charged, replays) == (2, 1)
    assert len(team_requests(server, wrong)) == 2  # the replay sent nothing
    assert (again.score, again.feedback, again.team) == (first.score, first.feedback, first.team)
    assert [o.verdict for o in again.grade.outcomes] == [o.verdict for o in first.grade.outcomes]
    lines = [json.loads(line) for line in (tmp_path / ROLLOUT_LOG).read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [2, 3]
    assert lines[0]["verdict"] == "wrong_answer" and lines[0]["tests_run"] >= 1
    assert lines[0]["program_hash"] and lines[0]["latency_s"] > 0
    stored = json.loads(gzip.decompress((tmp_path / lines[0]["transcript"]).read_bytes()))
    assert stored["team"]["transcript"] == first.team.transcript


def test_a_resumed_context_counts_each_journaled_rollout_once_and_sends_nothing(scripted,
                                                                               tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def first_run():
        async with job_context(server.base_url, tmp_path, budget=5) as ctx:
            await ctx.rollouts(ctx.seed_bundle, TRAIN[:3], iteration=1)
            await ctx.reflect("Suggest something.", purpose="gepa:reflect:solver")

    async def resumed():
        async with job_context(server.base_url, tmp_path, budget=5) as ctx:
            results = await ctx.rollouts(ctx.seed_bundle, TRAIN[:3], iteration=1)
            charged_after_retrace = ctx.ledger.charged
            answer = await ctx.reflect("Suggest something.", purpose="gepa:reflect:solver")
            replayed = await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1)
            fresh = await ctx.rollout(ctx.seed_bundle, TRAIN[3], iteration=1)
            return results, charged_after_retrace, answer, replayed, fresh, ctx

    asyncio.run(first_run())
    sent = len(server.chat_requests())
    results, retraced, answer, replayed, fresh, ctx = asyncio.run(resumed())
    assert [r.replay for r in results] == [False] * 3 and retraced == 3
    assert answer == "ok" and replayed.replay and not fresh.replay
    assert ctx.ledger.charged == 4 and ctx.replays == 1
    assert ctx.ledger.uncharged["reflect"]["calls"] == 1  # the journaled answer counts again
    new = server.chat_requests()[sent:]
    assert new and all(marker(TRAIN[3]) in message_text(r) for r in new)
    assert len((tmp_path / ROLLOUT_LOG).read_text().splitlines()) == 4
    assert len(_read_calls(tmp_path / CALLS_LOG)) == 1


def test_identical_rollouts_in_flight_at_once_run_once(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            results = await asyncio.gather(
                *(ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1) for _ in range(3)))
            return results, ctx.ledger.charged

    results, charged = asyncio.run(main())
    assert charged == 1 and sorted(r.replay for r in results) == [False, True, True]
    assert len(team_requests(server, TRAIN[0])) == 1


def test_judge_and_probe_are_kinds_of_their_own_with_their_sampling(scripted, tmp_path):
    server = scripted(keyed({"JUDGE": ["A"], "PROBE": ["probed"]}, default=["ok"]))

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            verdict = await ctx.judge("JUDGE which is better?", purpose="maspo:pairwise")
            probed = await ctx.probe("solver", "You are a careful solver.",
                                     [{"role": "user", "content": "PROBE this"}],
                                     purpose="mapro:node", max_tokens=64)
            reflected = await ctx.reflect("reflect", purpose="r", temperature=0.3)
            with pytest.raises(KeyError, match="not a role"):
                await ctx.probe("manager", "x", [{"role": "user", "content": "y"}], purpose="p")
            return (verdict, probed, reflected), ctx.ledger.uncharged

    answers, uncharged = asyncio.run(main())
    assert answers == ("A", "probed", "ok")
    assert {kind: usage["calls"] for kind, usage in uncharged.items()} == {
        "judge": 1, "probe": 1, "reflect": 1}
    judge, probe, reflect = server.chat_requests()
    assert judge["temperature"] == 0.0
    assert probe["max_tokens"] == 64 and probe["messages"][0] == {
        "role": "system", "content": "You are a careful solver."}
    assert reflect["temperature"] == 0.3
    logged = _read_calls(tmp_path / CALLS_LOG)
    assert [(c["kind"], c["answer"]) for c in logged] == [
        ("judge", "A"), ("probe", "probed"), ("reflect", "ok")]


def test_the_calls_log_survives_a_kill_mid_write_and_goes_on(tmp_path):
    journal = CallJournal(tmp_path)
    for index in range(3):
        journal.append({"key": f"k{index}", "answer": str(index), "error": None})
    raw = (tmp_path / CALLS_LOG).read_bytes()
    journal._stream = None  # a kill: the stream is never closed
    (tmp_path / CALLS_LOG).write_bytes(raw[:-3])  # and its last bytes never reached the disk
    resumed = CallJournal(tmp_path)
    kept = [line["key"] for line in resumed.lines]
    assert kept in (["k0", "k1"], ["k0", "k1", "k2"])
    resumed.append({"key": "k9", "answer": "9", "error": None})
    resumed.close()
    assert [line["key"] for line in _read_calls(tmp_path / CALLS_LOG)] == [*kept, "k9"]
    again = CallJournal(tmp_path)
    assert again.replay("k0")["answer"] == "0" and again.replay("k0") is None


def test_the_history_of_a_retraced_path_is_not_written_twice_and_a_new_path_cuts_it(tmp_path):
    def entry(note, charged=0):
        return HistoryEntry(bundle={"solver": "x"}, iteration=0, charged=charged, note=note)

    log = HistoryLog(tmp_path)
    for note in ("a", "b", "c"):
        log.append(entry(note))
    with (tmp_path / "history.jsonl").open("a") as handle:
        handle.write('{"kind": "cand')  # a line cut short by a kill
    retrace = HistoryLog(tmp_path)
    retrace.append(entry("a"))
    retrace.append(entry("b"))
    assert [e.note for e in read_history(tmp_path)] == ["a", "b", "c"] and retrace.retracing
    retrace.append(entry("other"))
    assert [e.note for e in read_history(tmp_path)] == ["a", "b", "other"]
    assert not retrace.retracing


def test_a_checkpoint_restores_and_can_fast_forward(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def first_run():
        async with job_context(server.base_url, tmp_path, budget=6) as ctx:
            assert ctx.restore() is None
            await ctx.rollouts(ctx.seed_bundle, TRAIN[:2], iteration=1)
            ctx.record_candidate(ctx.seed_bundle, scores={"train": 1.0}, iteration=1)
            ctx.checkpoint({"iteration": 1, "pool": ["a", "b"]})

    async def resumed():
        async with job_context(server.base_url, tmp_path, budget=6) as ctx:
            state = ctx.restore(fast_forward=True)
            charged = ctx.ledger.charged
            again = await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1)
            ctx.record_candidate(ctx.seed_bundle, scores={"train": 0.5}, iteration=2)
            return state, charged, again, ctx.ledger.charged

    asyncio.run(first_run())
    sent = len(server.chat_requests())
    state, charged, again, after = asyncio.run(resumed())
    assert state == {"iteration": 1, "pool": ["a", "b"]}
    assert charged == 2 and again.replay and after == 2
    assert len(server.chat_requests()) == sent
    assert [e.scores for e in read_history(tmp_path)] == [{"train": 1.0}, {"train": 0.5}]


def test_a_journal_line_cut_short_is_dropped(tmp_path):
    (tmp_path / ROLLOUT_LOG).write_text('{"key": "a", "id": "x"}\n{"key": "b", "i')
    journal = RolloutJournal(tmp_path)
    assert len(journal) == 1 and journal.lookup("b") is None
    assert (tmp_path / ROLLOUT_LOG).read_text() == '{"key": "a", "id": "x"}\n'


def test_a_failed_call_is_journaled_and_never_replayed(scripted, tmp_path):
    server = scripted([Reply.error(401), "fine"])

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            from lcb.optimize.method import ReflectionError

            with pytest.raises(ReflectionError, match="reflect model"):
                await ctx.reflect("x", purpose="p")
            return await ctx.reflect("x", purpose="p")

    assert asyncio.run(main()) == "fine"
    logged = _read_calls(tmp_path / CALLS_LOG)
    assert [line["error"] is None for line in logged] == [False, True]
    assert CallJournal(tmp_path).replay(logged[1]["key"])["answer"] == "fine"


def test_the_context_gives_the_team_graph_and_each_rollouts_role_io(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def main():
        async with job_context(server.base_url, tmp_path, topology="sequential") as ctx:
            rollout = await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1)
            return ctx.graph, rollout

    graph, rollout = asyncio.run(main())
    assert graph.kind == "chain" and graph.edges == (
        ("analyzer", "coder"), ("coder", "tester"), ("tester", "debugger"))
    io = rollout.role_io
    assert list(io) == ["analyzer", "coder", "tester", "debugger"]
    assert marker(TRAIN[0]) in io["analyzer"][0].input
    assert io["debugger"][0].output == rollout.team.final_text


def test_an_abandoned_rollout_is_none_again_on_a_retrace_and_its_counts_come_back(scripted,
                                                                                 tmp_path):
    down = TRAIN[2]
    model = TeamModel(sample_problems(), down=frozenset({down.id}))
    server = scripted(model)

    async def once():
        async with job_context(server.base_url, tmp_path, budget=5) as ctx:
            results = await ctx.rollouts(ctx.seed_bundle, TRAIN[:3], iteration=1)
            return [r is None for r in results], ctx.ledger.state()

    first, ledger = asyncio.run(once())
    model.down = frozenset()  # the outage is over: a rerun must not take another path
    sent = len(server.chat_requests())
    again, resumed = asyncio.run(once())
    assert first == again == [False, False, True]
    assert len(server.chat_requests()) == sent
    assert ledger["abandoned"] == resumed["abandoned"] == 1
    assert ledger["infra_failures"] == resumed["infra_failures"] > 0
    assert ledger["charged"] == resumed["charged"] == 2


def test_a_new_transcript_never_takes_the_file_of_a_kept_line_after_a_drop(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def run(rows, iteration):
        async with job_context(server.base_url, tmp_path, budget=8) as ctx:
            for problem in rows:
                await ctx.rollout(ctx.seed_bundle, problem, iteration=iteration)
            return ctx._evaluator.journal

    journal = asyncio.run(run(TRAIN[:3], 1))
    journal.drop([journal.lines[0]["key"]])
    kept = {line["transcript"] for line in RolloutJournal(tmp_path).lines}
    journal = asyncio.run(run(TRAIN[3:4], 2))
    names = [line["transcript"] for line in journal.lines]
    assert len(names) == len(set(names)) == 3 and kept < set(names)


def test_a_sharer_runs_the_rollout_itself_when_its_owner_is_cancelled(scripted, tmp_path):
    server = scripted([Reply("```python\nprint(1)\n```", latency_s=0.5)] * 4)

    async def main():
        async with job_context(server.base_url, tmp_path) as ctx:
            owner = asyncio.create_task(ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1))
            await asyncio.sleep(0.1)
            sharer = asyncio.create_task(ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1))
            await asyncio.sleep(0.1)
            owner.cancel()
            result = await sharer
            return owner.cancelled(), result, ctx.ledger.charged

    owner_cancelled, result, charged = asyncio.run(main())
    assert owner_cancelled and result is not None and not result.replay and charged == 1


def test_concurrent_identical_calls_get_their_own_answers_back_on_a_resume(scripted, tmp_path):
    answers = iter(["first", "second", "third"])
    server = scripted(lambda request: Reply(next(answers), latency_s=0.3 * len(
        server.chat_requests()) % 0.7))

    async def ask_three():
        async with job_context(server.base_url, tmp_path) as ctx:
            return await asyncio.gather(*(ctx.reflect("Same question.", purpose="same")
                                          for _ in range(3)))

    before = asyncio.run(ask_three())
    after = asyncio.run(ask_three())
    assert sorted(before) == ["first", "second", "third"] and after == before
    assert len(server.chat_requests()) == 3


def test_a_fast_forward_restores_the_ledger_and_the_calls_as_they_stood(scripted, tmp_path):
    server = scripted(TeamModel(sample_problems()))

    async def first_run():
        async with job_context(server.base_url, tmp_path, budget=6) as ctx:
            await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1)
            await ctx.rollout(ctx.seed_bundle, TRAIN[0], iteration=1)  # a replay
            await ctx.reflect("Q", purpose="p")
            ctx.checkpoint({"n": 1})
            return ctx.ledger_state()

    async def skipped():
        async with job_context(server.base_url, tmp_path, budget=6) as ctx:
            ctx.restore(fast_forward=True)
            state = ctx.ledger_state()
            await ctx.reflect("Q", purpose="p")  # the second such call: a new seed, a new call
            return state

    saved = asyncio.run(first_run())
    sent = len(server.chat_requests())
    restored = asyncio.run(skipped())
    assert restored == saved and restored["replays"] == 1
    assert restored["refusal_watch"]["confirmed"] is True
    assert len(server.chat_requests()) == sent + 1


def test_refusals_refunded_by_a_streak_that_spans_a_resume_leave_the_journal(scripted,
                                                                            tmp_path):
    from lcb.optimize.outcomes import Misconfigured

    rows = [*TRAIN, *(BY_ID[i] for i in SPLITS.validation)]  # 11 rows: 1 answered, 10 refused
    refused = {p.id for p in rows[1:]}
    team = TeamModel(sample_problems())
    too_long = Reply.error(400, message="This model's maximum context length is 4096 tokens. "
                                        "However, you requested 5000 tokens.")
    server = scripted(lambda r: too_long if (p := team.problem_of(r)) and p.id in refused
                      else team(r))

    async def session(count):
        async with job_context(server.base_url, tmp_path, budget=20) as ctx:
            try:
                for problem in rows[:count]:
                    await ctx.rollout(ctx.seed_bundle, problem, iteration=1)
            except Misconfigured as tripped:
                ctx.forget_refunded(tripped)
                return tripped, ctx.ledger.charged
            return None, ctx.ledger.charged

    assert asyncio.run(session(6)) == (None, 6)  # killed after 1 answer and 5 refusals
    tripped, charged = asyncio.run(session(11))
    assert tripped is not None and "context" in str(tripped) and charged == 1
    lines = RolloutJournal(tmp_path).lines
    assert [line["id"] for line in lines] == [rows[0].id]  # the refunded ones are gone
