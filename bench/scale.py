"""Throughput at scale: `lcb run`'s batch path at concurrency 8, 64 and 256 against a fast
streaming endpoint, side by side for several checkouts of lcb.

Run from the repository root:
  .venv/bin/python bench/scale.py                      # this checkout, full (~2 min)
  .venv/bin/python bench/scale.py --tree ../before --tree .   # the first tree is the baseline
  .venv/bin/python bench/scale.py --quick              # a smoke check (~20 s per tree)

The endpoint runs in its own process (as a real server would: no shared GIL) and streams like
vLLM: `--latency` seconds to the first byte, then one token per SSE chunk, one chunk every
`--delay` seconds (role chunk, `--chunks` content tokens, finish chunk, usage chunk). It is a
small asyncio server that writes every open stream's next chunk on one shared tick, its chunks
encoded once, so its own CPU stays small next to lcb's. Every reply is the same right stdin
program (after filler tokens) for "A+B" problems written as tests/helpers_runner.py writes them.

Each configuration (tree, concurrency, reply length) runs `lcb.runs.runner.run_batch` (the
path of `lcb run`: team, model gateway, grading pool, records) in a fresh Python process with
that tree first on sys.path; trees alternate. The timed span is the batch's solving
(`_Batch.run_all` of lcb.runs.session: first request to last record), the CPU is that process's own
(`getrusage(RUSAGE_SELF)`: threads included, grading workers are other processes), over the
same span. Columns:
  problems, conc     problems in the batch, problems solved at once (= requests in flight)
  chunks             SSE chunks per reply (content tokens + role, finish and usage chunks)
  wall s             the timed span
  ideal s            endpoint-bound: ceil(problems / conc) x time per reply
  share              ideal / wall (target >= 90 % at 64 and 256)
  gen s, gen %       from the start to the last model reply, and ideal / that: the rest of
                     the wall time is the grading of the last wave (the tail no overlap hides)
  lag ms             the event loop's longest stall (how late a 20 ms sleep woke)
  cpu s              lcb's CPU over the span
  us/chunk, ms/prob  the fit cpu = a + b * problems * chunks over the two reply lengths of one
                     (tree, concurrency): b (target <= 25 us) and a / problems, the CPU per
                     problem outside the streamed chunks (target <= 5 ms)
  rss MB             the process's peak resident memory
  pass@1             every program graded right: 1.00
Then each row's ratio to the first tree (wall, cpu, us/chunk).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
EXTRA_EVENTS = 3  # role, finish and usage chunks around the content tokens


# --- the endpoint, in its own process ---------------------------------------------------------

def _event(delta: dict, reason: str | None = None, usage: dict | None = None) -> bytes:
    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
             "model": "bench", "choices": [] if usage else
             [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}
    if usage:
        chunk["usage"] = usage
    data = f"data: {json.dumps(chunk)}\n\n".encode()
    return b"%X\r\n%s\r\n" % (len(data), data)


def reply_frames(tokens: int) -> list[bytes]:
    """The chunked-transfer frames of one reply: `tokens` content chunks, the program last."""
    code = [PROGRAM[i:i + 4] for i in range(0, len(PROGRAM), 4)]
    words = [" step"] * max(0, tokens - len(code) - 1) + ["\n\n"] + code
    usage = {"prompt_tokens": 200, "completion_tokens": len(words),
             "total_tokens": 200 + len(words)}
    frames = [_event({"role": "assistant", "content": ""})]
    frames += [_event({"content": word}) for word in words]
    frames += [_event({}, "stop"), _event({}, usage=usage)]
    done = b"data: [DONE]\n\n"
    frames[-1] += b"%X\r\n%s\r\n0\r\n\r\n" % (len(done), done)
    return frames


class Endpoint:
    """An OpenAI-compatible endpoint: GET /models; POST /chat/completions streams the reply
    whose length the model id names (`bench-<tokens>`), after `latency` s, one frame per tick.
    A request without a problem marker (the endpoint check) gets a short reply at once."""

    def __init__(self, lengths: list[int], latency: float, delay: float):
        self.frames = {f"bench-{n}": reply_frames(n) for n in lengths}
        self.short = reply_frames(1)
        self.latency, self.delay = latency, delay
        self.streams: list[list] = []  # [writer, frames, next index, done future]

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due = max(due + self.delay, loop.time())  # late ticks do not burst
            await asyncio.sleep(due - loop.time())
            keep = []
            for entry in self.streams:
                writer, frames, index, done = entry
                if not writer.is_closing():
                    writer.write(frames[index])
                entry[2] = index + 1
                if writer.is_closing() or index + 1 == len(frames):
                    done.set_result(None)
                else:
                    keep.append(entry)
            self.streams = keep

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = re.search(rb"(?i)content-length:\s*(\d+)", head)
                body = await reader.readexactly(int(size.group(1))) if size else b""
                if head.startswith(b"GET"):
                    models = [{"id": name, "object": "model"} for name in self.frames]
                    data = json.dumps({"object": "list", "data": models}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
                    continue
                await self.answer(json.loads(body), b"[[" in body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, request: dict, marked: bool, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        if not marked:
            writer.write(b"".join(self.short))
            return
        await asyncio.sleep(self.latency)
        frames = self.frames[request["model"]]
        writer.write(frames[0])
        done = asyncio.get_running_loop().create_future()
        self.streams.append([writer, frames, 1, done])
        await done

    async def serve(self, urls: mp.Queue, stop: mp.Event) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0, backlog=1024)
        ticker = asyncio.create_task(self.tick())
        urls.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        while not stop.is_set():
            await asyncio.sleep(0.2)
        ticker.cancel()
        server.close()


def serve(lengths: list[int], latency: float, delay: float, urls: mp.Queue,
          stop: mp.Event) -> None:
    asyncio.run(Endpoint(lengths, latency, delay).serve(urls, stop))


# --- one configuration, in a fresh process with its tree first on sys.path ----------------------

def child(spec: dict) -> dict:
    """Run one batch as `spec` says; the figures of its solving span."""
    sys.path.insert(0, spec["tree"])
    import lcb
    from lcb.runs import runner
    from tests.helpers_runner import model_config, problem_ids, run_config, write_problems

    try:  # where the batch at work lives (earlier trees: in the runner itself)
        from lcb.runs.session import _Batch as batch
    except ImportError:
        batch = runner._Batch
    span: dict = {"replied": 0.0, "lag_s": 0.0}
    solve, run_all = batch.solve, batch.run_all

    async def solved(self, *work):  # the last model reply of the batch
        result = await solve(self, *work)
        span["replied"] = time.monotonic()
        return result

    async def lag() -> None:  # how late a 20 ms sleep wakes: the event loop's longest stall
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + 0.02
            await asyncio.sleep(0.02)
            span["lag_s"] = max(span["lag_s"], loop.time() - due)

    async def timed(self, pending):  # the solving span: first request to last record
        cpu, wall, watch = time.process_time(), time.monotonic(), asyncio.create_task(lag())
        try:
            await run_all(self, pending)
        finally:
            watch.cancel()
            span.update(cpu_s=time.process_time() - cpu, wall_s=time.monotonic() - wall,
                        gen_s=span["replied"] - wall)

    batch.run_all, batch.solve = timed, solved
    n, c = spec["problems"], spec["concurrency"]
    with tempfile.TemporaryDirectory() as tmp:
        data = write_problems(Path(tmp) / "rows.jsonl", problem_ids(n))
        model = model_config(spec["url"], model_id=f"bench-{spec['tokens']}", timeout_s=60.0,
                             max_concurrent_requests=c)
        config = run_config(spec["url"], data, Path(tmp) / "out", concurrency=c,
                            grade_workers=None, progress_interval_s=3600.0, model=model)
        import io
        summary = asyncio.run(runner.run_batch(config, stream=io.StringIO(), plain=True))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    del span["replied"]
    return {**span, "em": summary["em"], "rss_mb": rss_mb, "lcb": lcb.__file__}


def run_child(spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": spec["tree"]}
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                          cwd=spec["tree"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{spec}: failed\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    expected = str(Path(spec["tree"]) / "lcb" / "__init__.py")
    if result["lcb"] != expected:
        raise SystemExit(f"ran {result['lcb']}, not the tree's {expected}")
    return result


# --- the parent: endpoint, configurations, table ------------------------------------------------

def fit(short: dict, long: dict) -> tuple[float, float]:
    """(us per chunk, ms per problem) from two runs that differ only in reply length."""
    n = short["problems"]
    per_chunk = (long["cpu_s"] - short["cpu_s"]) / (n * (long["chunks"] - short["chunks"]))
    per_run = short["cpu_s"] - per_chunk * n * short["chunks"]
    return per_chunk * 1e6, per_run / n * 1e3


def measure(args: argparse.Namespace, url: str) -> list[dict]:
    rows = []
    plan = [(c, t) for c in args.concurrency for t in args.chunks]
    for index, (c, tokens) in enumerate(plan):
        trees = args.tree if index % 2 == 0 else args.tree[::-1]  # alternate the order
        for tree in trees:
            n = args.factor * c
            spec = {"tree": tree, "url": url, "problems": n, "concurrency": c, "tokens": tokens}
            result = run_child(spec)
            chunks = tokens + EXTRA_EVENTS
            ideal = math.ceil(n / c) * (args.latency + (chunks - 1) * args.delay)
            rows.append({**spec, **result, "chunks": chunks, "ideal_s": ideal})
            print(f"  {Path(tree).name or tree}: {n} problems at {c}, {chunks} chunks: "
                  f"{result['wall_s']:.2f} s", file=sys.stderr, flush=True)
    for tree in args.tree:
        for c in args.concurrency:
            mine = sorted((r for r in rows if r["tree"] == tree and r["concurrency"] == c),
                          key=lambda r: r["chunks"])
            us, ms = fit(mine[0], mine[-1])
            for row in mine:
                row.update(us_chunk=us, ms_problem=ms)
    return rows


def report(rows: list[dict], trees: list[str]) -> None:
    print(f"{'tree':<12} {'problems':>8} {'conc':>5} {'chunks':>6} {'wall s':>7} {'ideal s':>7} "
          f"{'share':>6} {'gen s':>6} {'gen %':>6} {'lag ms':>6} {'cpu s':>6} {'us/chunk':>8} "
          f"{'ms/prob':>7} {'rss MB':>7} {'pass@1':>6}")
    for r in rows:
        print(f"{Path(r['tree']).name[:12]:<12} {r['problems']:>8} {r['concurrency']:>5} "
              f"{r['chunks']:>6} {r['wall_s']:>7.2f} {r['ideal_s']:>7.2f} "
              f"{r['ideal_s'] / r['wall_s']:>6.0%} {r['gen_s']:>6.2f} "
              f"{r['ideal_s'] / r['gen_s']:>6.0%} {r['lag_s'] * 1000:>6.0f} "
              f"{r['cpu_s']:>6.2f} {r['us_chunk']:>8.1f} "
              f"{r['ms_problem']:>7.1f} {r['rss_mb']:>7.0f} {r['em']:>6.2f}")
    if len(trees) < 2:
        return
    print(f"\nratio to {trees[0]} (wall, cpu, us/chunk; < 1 is faster)")
    base = {(r["concurrency"], r["chunks"]): r for r in rows if r["tree"] == trees[0]}
    for r in rows:
        b = base[r["concurrency"], r["chunks"]]
        if r["tree"] != trees[0]:
            print(f"{Path(r['tree']).name[:12]:<12} {r['problems']:>8} {r['concurrency']:>5} "
                  f"{r['chunks']:>6} {r['wall_s'] / b['wall_s']:>7.2f} "
                  f"{r['cpu_s'] / b['cpu_s']:>6.2f} {r['us_chunk'] / b['us_chunk']:>8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", help="a checkout of lcb (repeatable; the "
                        "first is the baseline of the ratios); default: this one")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                        default=[8, 64, 256])
    parser.add_argument("--chunks", type=lambda s: [int(x) for x in s.split(",")],
                        default=[100, 400], help="content tokens per reply: two lengths")
    parser.add_argument("--factor", type=int, default=2, help="problems per slot")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds to the first byte")
    parser.add_argument("--delay", type=float, default=0.01, help="seconds between chunks")
    parser.add_argument("--quick", action="store_true", help="8 and 32 at once, 40/120 tokens")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.quick:
        args.concurrency, args.chunks = [8, 32], [40, 120]
    args.tree = [str(Path(t).resolve()) for t in args.tree or [HERE]]
    urls, stop = mp.Queue(), mp.Event()
    endpoint = mp.Process(target=serve, args=(args.chunks, args.latency, args.delay, urls, stop),
                          daemon=True)
    endpoint.start()
    started = time.monotonic()
    try:
        rows = measure(args, urls.get(timeout=60))
    finally:
        stop.set()
        endpoint.join(timeout=10)
    print(f"one streamed reply per problem: {args.latency:.2f} s to the first byte, then one "
          f"chunk every {args.delay * 1000:.0f} ms; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}; {time.monotonic() - started:.0f} s in all")
    report(rows, args.tree)
    return 0 if all(r["em"] == 1.0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
