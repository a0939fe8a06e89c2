"""Grader benchmark: one overhead-bound corpus graded three ways, side by side.

    .venv/bin/python bench/grader.py [--seed 0] [--jobs 2] [--skip-per-test]

The corpus (built deterministically from `--seed`): 32 problems of our own, half stdin, half
functional, each with 20-200 small tests, all in `private_test_cases` (public tests empty, so
the default and the official grader run exactly the same tests), and one correct program per
problem (so every test runs). It is graded by:
  (a) `lcb score` as a whole command: a subprocess, interpreter start-up and imports included;
  (b) LiveCodeBench's own path, `compute_code_generation_metrics.evaluate_generations`
      (a process pool of `--jobs` workers, one Manager + forked process per program);
  (c) one fresh `python -c` per test, `--jobs` at a time (the predecessor's way).
It prints wall times, the ratios against the targets (ours <= 1/2 of (b), <= 1/30 of (c)), a
per-mode breakdown (our warm pool without start-up against (b), stdin and functional programs
apart), (d) the fork floor: what one bare fork+exit per stdin test costs in processes like
our workers, and the ratio (a) would have if our stdin grading cost only that, and the cost of
one time-limited program under our grader (target <= 6.5 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lcb.data.problems import decode_row, encode_private_tests  # noqa: E402
from lcb.sandbox.prelude import PRELUDE  # noqa: E402

N_PROBLEMS = 32


def _numbers(rng: random.Random) -> list[int]:
    return [rng.randint(-1000, 1000) for _ in range(rng.randint(1, 12))]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcde") for _ in range(rng.randint(1, 10)))


# (name, make one test -> (input, output), correct program); stdin problems first.
STDIN_KINDS = [
    ("sum", lambda r: (lambda a: (f"{len(a)}\n{' '.join(map(str, a))}\n", f"{sum(a)}\n"))(
        _numbers(r)), "input()\nprint(sum(map(int, input().split())))\n"),
    ("max", lambda r: (lambda a: (f"{len(a)}\n{' '.join(map(str, a))}\n", f"{max(a)}\n"))(
        _numbers(r)), "import sys\nsys.stdin.readline()\n"
                      "print(max(int(x) for x in sys.stdin.readline().split()))\n"),
    ("reverse", lambda r: (lambda w: (f"{w}\n", f"{w[::-1]}\n"))(_word(r)),
     "print(input().strip()[::-1])\n"),
    ("halves", lambda r: (lambda a: (f"{len(a)}\n{' '.join(map(str, a))}\n",
                                      "\n".join(f"{v / 2}" for v in a) + "\n"))(_numbers(r)),
     "import sys\ndata = sys.stdin.read().split()\nfor v in data[1:]:\n    print(int(v) / 2)\n"),
]
FUNCTIONAL_KINDS = [
    ("addAll", lambda r: (lambda a: (json.dumps(a), json.dumps(sum(a))))(_numbers(r)),
     "class Solution:\n    def addAll(self, nums: List[int]) -> int:\n        return sum(nums)\n"),
    ("sortDesc", lambda r: (lambda a: (json.dumps(a), json.dumps(sorted(a, reverse=True))))(
        _numbers(r)), "class Solution:\n    def sortDesc(self, nums):\n"
                      "        return sorted(nums, reverse=True)\n"),
    ("countChar", lambda r: (lambda w, c: (f"{json.dumps(w)}\n{json.dumps(c)}",
                                           json.dumps(w.count(c))))(_word(r), r.choice("abc")),
     "class Solution:\n    def countChar(self, s: str, c: str) -> int:\n"
     "        return Counter(s)[c]\n"),
    ("spread", lambda r: (lambda a: (json.dumps(a), json.dumps([min(a), max(a)])))(_numbers(r)),
     "def spread(nums):\n    return min(nums), max(nums)\n"),
]


def build_corpus(seed: int) -> tuple[list[dict], list[dict]]:
    """Rows in the official format and one correct prediction per row."""
    rng = random.Random(seed)
    rows, predictions = [], []
    for index in range(N_PROBLEMS):
        functional = index >= N_PROBLEMS // 2
        kinds = FUNCTIONAL_KINDS if functional else STDIN_KINDS
        name, make, program = kinds[index % len(kinds)]
        cases = [make(rng) for _ in range(rng.randint(20, 200))]
        qid = f"bench_{index:02d}_{name}"
        starter = f"class Solution:\n    def {name}(self, *args):\n        " if functional else ""
        rows.append({
            "question_title": qid, "question_content": f"bench problem {name}",
            "platform": "leetcode" if functional else "atcoder", "question_id": qid,
            "contest_id": "bench", "contest_date": "2024-01-01T00:00:00",
            "starter_code": starter, "difficulty": "easy", "public_test_cases": "[]",
            "private_test_cases": encode_private_tests(
                [{"input": i, "output": o, "testtype": "functional" if functional else "stdin"}
                 for i, o in cases]),
            "metadata": json.dumps({"func_name": name} if functional else {}),
        })
        predictions.append({"id": qid, "code": program})
    return rows, predictions


def lcb_command() -> list[str]:
    """The installed `lcb` script, or the same entry point through the venv's python."""
    script = Path(sys.executable).with_name("lcb")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from lcb.cli import main; main()"]


def time_ours(workdir: Path, jobs: int) -> tuple[float, int]:
    out = workdir / "results.jsonl"
    argv = lcb_command() + ["score", "--data", str(workdir / "rows.jsonl"), "--predictions",
                            str(workdir / "pred.jsonl"), "--out", str(out), "--jobs", str(jobs)]
    started = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return wall, sum(json.loads(line)["em"] for line in out.read_text().splitlines())


async def _all(calls: list) -> list:
    import asyncio

    return await asyncio.gather(*calls)


def time_pool(problems: list, predictions: list[dict], jobs: int) -> tuple[float, int]:
    """Our grader alone: a warm `GradingPool` in this process, no command start-up."""
    import asyncio

    from lcb.grading import GradingPool

    async def grade_all(pool: GradingPool) -> list:
        return await asyncio.gather(*(pool.grade(p, pred["code"])
                                      for p, pred in zip(problems, predictions, strict=True)))

    with GradingPool(jobs) as pool:
        warm = [pool.grade(problems[0], predictions[0]["code"]) for _ in range(pool.size)]
        asyncio.run(_all(warm))  # every slot started and used once before the clock starts
        started = time.perf_counter()
        grades = asyncio.run(grade_all(pool))
    return time.perf_counter() - started, sum(g.em for g in grades)


def time_official(problems: list, predictions: list[dict], jobs: int) -> tuple[float, int]:
    from livecodebench.evaluation.compute_code_generation_metrics import evaluate_generations

    samples = [{"input_output": json.dumps({
        "inputs": [t.input for t in p.private_tests],
        "outputs": [t.output for t in p.private_tests], "fn_name": p.fn_name})}
        for p in problems]
    generations = [[pred["code"]] for pred in predictions]
    started = time.perf_counter()
    results, _ = evaluate_generations(samples, generations, num_process_evaluate=jobs, timeout=6)
    wall = time.perf_counter() - started
    solved = sum(all(r is True or r == 1 for r in results[i][0]) for i in range(len(problems)))
    return wall, solved


def _per_test_script(problem, code: str) -> str:
    if problem.fn_name is None:
        return PRELUDE + code
    call = "Solution()." if "class Solution" in code else ""
    return (PRELUDE + code + "\nimport json as _j, sys as _s\n"
            "_args = [_j.loads(line) for line in _s.stdin.read().split('\\n')]\n"
            f"_r = {call}{problem.fn_name}(*_args)\n"
            "print(_j.dumps(list(_r) if isinstance(_r, tuple) else _r))\n")


def _run_one(problem, script: str, test) -> bool:
    from lcb.grading.compare import stdout_matches

    done = subprocess.run([sys.executable, "-c", script], input=test.input, text=True,
                          capture_output=True, timeout=6)
    if done.returncode != 0:
        return False
    if problem.fn_name is None:
        return stdout_matches(done.stdout, test.output)
    return json.loads(done.stdout) == json.loads(test.output)


def time_per_test(problems: list, predictions: list[dict], jobs: int) -> tuple[float, int]:
    started = time.perf_counter()
    jobs_list = [(p, _per_test_script(p, pred["code"]), test)
                 for p, pred in zip(problems, predictions, strict=True) for test in p.private_tests]
    with ThreadPoolExecutor(jobs) as pool:
        verdicts = list(pool.map(lambda job: _run_one(*job), jobs_list))
    failed = {job[0].id for job, ok in zip(jobs_list, verdicts, strict=True) if not ok}
    return time.perf_counter() - started, len(problems) - len(failed)


FORK_FLOOR = """
import gc, os, sys, time
sys.path.insert(0, {root!r})
from lcb.sandbox import child
from lcb.sandbox.prelude import import_prelude_modules
import_prelude_modules()
child.prelude_module("__main__")
gc.freeze()
n = int(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print(time.perf_counter() - started, flush=True)
"""


def time_fork_floor(n_tests: int, jobs: int) -> float:
    """The least any process-per-test grader pays for `n_tests` stdin tests here: `jobs`
    prelude-loaded interpreters (like our workers) fork a child per test that exits at once
    (no program, no I/O, no containment), started together; the slowest one's time."""
    script = FORK_FLOOR.format(root=str(ROOT))
    shares = [n_tests // jobs + (i < n_tests % jobs) for i in range(jobs)]
    procs = [subprocess.Popen([sys.executable, "-s", "-S", "-c", script, str(n)], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for n in shares]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return max(float(proc.communicate()[0]) for proc in procs)


def time_limit_cost(problems: list) -> dict[str, float]:
    """Wall time of grading one program that never ends, per mode, on a warm pool."""
    from lcb.grading import GradingPool

    costs = {}
    with GradingPool() as pool:
        for problem, code in ((problems[0], "while True:\n    pass\n"),
                              (problems[-1], "import time\ndef spread(nums):\n"
                                             "    time.sleep(100)\n")):
            pool.grade_sync(problem, "pass\n")  # warm up
            started = time.perf_counter()
            grade = pool.grade_sync(problem, code)
            costs[str(problem.mode)] = time.perf_counter() - started
            assert grade.outcomes[0].verdict.value == "time_limit", grade.outcomes
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--skip-per-test", action="store_true",
                        help="skip (c), the slowest way")
    args = parser.parse_args()
    rows, predictions = build_corpus(args.seed)
    problems = [decode_row(row) for row in rows]
    n_tests = sum(len(p.private_tests) for p in problems)
    workdir = Path(tempfile.mkdtemp(prefix="lcb-bench-"))
    try:
        for name, items in (("rows.jsonl", rows), ("pred.jsonl", predictions)):
            (workdir / name).write_text("".join(json.dumps(x) + "\n" for x in items))
        print(f"corpus: {len(problems)} programs, {n_tests} tests "
              f"({sum(p.fn_name is None for p in problems)} stdin programs), jobs={args.jobs}")
        ours, ours_ok = time_ours(workdir, args.jobs)
        print(f"(a) lcb score, whole command      {ours:8.2f} s   solved {ours_ok}")
        official, official_ok = time_official(problems, predictions, args.jobs)
        print(f"(b) official evaluate_generations {official:8.2f} s   solved {official_ok}"
              f"   ours/official = {ours / official:.3f} (target <= 0.5)")
        if not args.skip_per_test:
            per_test, per_test_ok = time_per_test(problems, predictions, args.jobs)
            print(f"(c) one python -c per test        {per_test:8.2f} s   solved {per_test_ok}"
                  f"   ours/per-test = {ours / per_test:.4f} = 1/{per_test / ours:.1f} "
                  f"(target <= 1/30)")
        half = len(problems) // 2
        pool_s = {}
        for label, part in (("stdin", slice(0, half)), ("functional", slice(half, None))):
            ours_part, _ = time_pool(problems[part], predictions[part], args.jobs)
            official_part, _ = time_official(problems[part], predictions[part], args.jobs)
            pool_s[label] = ours_part
            print(f"    {label:10} programs only: warm pool {ours_part:6.2f} s, official "
                  f"{official_part:6.2f} s, ratio {ours_part / official_part:.3f}")
        stdin_tests = sum(len(p.private_tests) for p in problems[:half])
        floor = time_fork_floor(stdin_tests, args.jobs)
        best = ours - pool_s["stdin"] + floor
        print(f"(d) fork floor: {stdin_tests} bare fork+exit+wait in {args.jobs} prelude-loaded "
              f"processes {floor:6.2f} s ({floor / stdin_tests * args.jobs * 1000:.2f} ms per "
              f"test per worker; ours {pool_s['stdin'] / stdin_tests * args.jobs * 1000:.2f})")
        print(f"    (a) with its stdin grading at that floor: {best:.2f} s = "
              f"{best / official:.3f} of (b): the least a process per stdin test reaches here")
        for mode, cost in time_limit_cost(problems).items():
            print(f"time-limited {mode} program: {cost:.2f} s (target <= 6.5 s)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
