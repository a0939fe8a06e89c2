"""Batch throughput: the same problems at concurrency 1 and 8 against a slow scripted endpoint.

Run from the repository root:
  .venv/bin/python bench/batch.py [--problems 24] [--latency 0.3] [--chunk-delay 0.01]

Every problem is answered by one scripted reply, streamed as every model call is: the server
(in its own process, like a real endpoint) waits `--latency` before the first byte, then sends
the answer in `--chunk-chars`-character SSE chunks `--chunk-delay` apart. So the endpoint bounds
the wall time: at concurrency c the ideal is ceil(n / c) * (time per reply). The script prints
both wall times, the speed-up (target >= 6.4x), the ideal speed-up for n problems, its share of
the ideal (target >= 90 %), and the harness overhead per problem (wall time beyond the ideal,
divided by n). The timed span is `run_batch` from the
start of solving to the last record (summary `wall_s`); loading and the endpoint check are shown
separately.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import math
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lcb.runs.runner import run_batch  # noqa: E402
from tests import scripted_server as scripted  # noqa: E402
from tests.helpers_runner import (  # noqa: E402
    RIGHT,
    problem_ids,
    read_lines,
    run_config,
    script,
    write_problems,
)
from tests.scripted_wire import stream_events  # noqa: E402

TARGET = 6.4  # the figure: 80 % of the 8x of 8 slots
TARGET_SHARE = 0.9  # of the ideal for n problems, where ceil(n / 8) rounds cap the ideal


def measure(base_url: str, data: Path, out: Path, concurrency: int) -> dict:
    config = run_config(base_url, data, out, concurrency=concurrency, grade_workers=None,
                        progress_interval_s=3600.0)
    started = time.monotonic()
    summary = asyncio.run(run_batch(config, stream=io.StringIO(), plain=True))
    if summary["em"] < 1.0:  # say why, so a failed run is not just a number
        failed = [r for r in read_lines(out / "predictions.jsonl") if not r["em"]]
        print(f"concurrency {concurrency}: {len(failed)} problem(s) failed, e.g.",
              failed[0]["error"], failed[0]["verdicts"], failed[0]["feedback"], file=sys.stderr)
    return {"total_s": time.monotonic() - started, "wall_s": summary["wall_s"],
            "em": summary["em"], "n": summary["n"]}


def streamed_reply(chunk_chars: int, chunk_delay: float) -> scripted.Reply:
    return scripted.Reply(RIGHT, chunk_chars=chunk_chars, chunk_delay_s=chunk_delay)


def reply_time(latency: float, chunk_chars: int, chunk_delay: float) -> float:
    """Seconds the endpoint takes per reply: the latency, then a delay between streamed events
    (role, content pieces, finish, usage)."""
    events = stream_events(streamed_reply(chunk_chars, chunk_delay), completion_id="x",
                           model="m", finish="stop", usage={})
    return latency + (len(events) - 1) * chunk_delay


def serve(ids: list[str], reply: scripted.Reply, latency: float, urls: mp.Queue,
          stop: mp.Event) -> None:
    """The scripted endpoint, in its own process as a real server would be (no shared GIL)."""
    answers = script({qid: [reply] for qid in ids})
    with scripted.scripted_server(answers, latency_s=latency) as server:
        urls.put(server.base_url)
        stop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=24)
    parser.add_argument("--latency", type=float, default=0.3,
                        help="seconds before a reply's first byte")
    parser.add_argument("--chunk-chars", type=int, default=4, help="characters per SSE chunk")
    parser.add_argument("--chunk-delay", type=float, default=0.01,
                        help="seconds between SSE chunks")
    args = parser.parse_args()
    n, ids = args.problems, problem_ids(args.problems)
    reply = streamed_reply(args.chunk_chars, args.chunk_delay)
    latency = reply_time(args.latency, args.chunk_chars, args.chunk_delay)
    urls, stop = mp.Queue(), mp.Event()
    endpoint = mp.Process(target=serve, args=(ids, reply, args.latency, urls, stop),
                          daemon=True)
    endpoint.start()
    try:
        base_url = urls.get(timeout=60)
        with tempfile.TemporaryDirectory() as tmp:
            data = write_problems(Path(tmp) / "rows.jsonl", ids)
            runs = {c: measure(base_url, data, Path(tmp) / f"c{c}", c) for c in (1, 8)}
    finally:
        stop.set()
        endpoint.join(timeout=10)
    print(f"{n} problems, one streamed model reply each, {latency:.2f}s per reply "
          f"({args.latency:.2f}s to the first byte, chunks of {args.chunk_chars} characters "
          f"{args.chunk_delay * 1000:.0f} ms apart)")
    print(f"{'concurrency':>11} {'wall s':>8} {'ideal s':>8} {'overhead/problem ms':>20} "
          f"{'load+check s':>13} {'pass@1':>7}")
    for c, result in runs.items():
        ideal = math.ceil(n / c) * latency
        overhead_ms = (result["wall_s"] - ideal) / n * 1000
        print(f"{c:>11} {result['wall_s']:>8.2f} {ideal:>8.2f} {overhead_ms:>20.1f} "
              f"{result['total_s'] - result['wall_s']:>13.2f} {result['em']:>7.2f}")
    speedup = runs[1]["wall_s"] / runs[8]["wall_s"]
    ideal_speedup = n / math.ceil(n / 8)
    share = speedup / ideal_speedup
    print(f"speed-up 8 vs 1: {speedup:.2f}x (ideal for {n} problems {ideal_speedup:.2f}x; "
          f"target >= {TARGET}x: {'met' if speedup >= TARGET else 'NOT met'})")
    print(f"share of the ideal: {share:.0%} (target >= {TARGET_SHARE:.0%}: "
          f"{'met' if share >= TARGET_SHARE else 'NOT met'})")
    return 0 if all(r["em"] == 1.0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
