"""Resume by fast-forward against resume by retrace: what each costs a native method.

Run from the repository root:
  .venv/bin/python bench/resume.py [--methods tavo hivemind maspob] [--pulls 100]

Part 1, per method: its resume test's job (`tests/optimize/test_<method>*.py`: the planted
scenario on the sample set, every reply from the scripted server) runs to the end once, and once
killed with `kill -9` after the resume test's number of charged rollouts. The killed folder is
copied and both copies are rerun: one as the method does it (`ctx.restore(fast_forward=True)`),
one forced to retrace (the checkpoint ignored: the method starts over and the journals answer
every rollout and call made before the kill). For each the script prints the rerun's wall time,
the model calls the server got, the rollouts charged, and whether `result.json`, the charged
keys and the history equal the uninterrupted run's.

Part 2: the work a retrace redoes that no journal holds, for maspob: its surrogate refits at the
default settings (`MaspobSettings()`: 800 epochs, patience 200, hidden 32) on four roles with
pools of 20 (random 384-dimensional embeddings), one refit per pull after the warm-up, as in a
job; it prints each refit's seconds and their running sum at a few pull counts. A retrace after
a kill at pull n spends that sum before its first new rollout; a fast-forward spends none.
(docs/protocol.md, "Resume", quotes both parts.)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers_methods import FIX  # noqa: E402
from tests.helpers_optimize import TeamModel, sample_problems  # noqa: E402
from tests.helpers_planted import RESPONDERS, WRONG, PlantedModel  # noqa: E402
from tests.helpers_resume import (  # noqa: E402
    _history,
    charged_lines,
    command,
    environment,
    finish,
    kill_after,
    start,
)
from tests.scripted_server import scripted_server  # noqa: E402

RETRACE = """\
import runpy, sys
from lcb.optimize import recorder
restore = recorder.JobRecorder.restore
recorder.JobRecorder.restore = lambda self, *, fast_forward=False: (
    None if fast_forward else restore(self))
sys.argv = ["optimizers.protocol.run", *sys.argv[1:]]
runpy.run_module("optimizers.protocol.run", run_name="__main__", alter_sys=True)
"""


def kill_tests() -> dict[str, dict[str, Any]]:
    """Each native method's kill test: its job's settings, responders and kill point."""
    from tests.optimize.test_hivemind import lessons_responder
    from tests.optimize.test_maspob import KILL_BUDGET, SMALL, maspob_responder
    from tests.optimize.test_tavo import _rules_that_grow, tavo_responder

    return {
        "tavo": {"budget": 15, "topology": "sequential", "settings": ["train_batch=3"],
                 "responders": [tavo_responder(always_edit=True, rules=_rules_that_grow)],
                 "kill_at": 10},
        "hivemind": {"budget": 25, "topology": "sequential", "settings": ["batch_size=2"],
                     "responders": [lessons_responder], "kill_at": 21},
        "maspob": {"budget": KILL_BUDGET, "topology": "centralized",
                   "settings": [f"{k}={v}" for k, v in SMALL.items()],
                   "responders": [maspob_responder], "kill_at": 7},
    }


def compare(method: str, case: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Part 1 for one method (module docstring)."""
    team = TeamModel(sample_problems(), wrong=WRONG, fixed_by=FIX)
    with scripted_server(PlantedModel(team, [*case["responders"], *RESPONDERS])) as server:
        env = {**environment(server.base_url), "LCB_EMBEDDINGS": "hashing"}

        def argv(name: str) -> list[str]:
            return command(method, folder / name, budget=case["budget"],
                           topology=case["topology"], settings=case["settings"])

        whole = finish(start(argv("whole"), env))
        kill_after(argv("killed"), folder / "killed", env, rollouts=case["kill_at"])
        row: dict[str, Any] = {"method": method, "charged": whole["charged"],
                               "journaled_at_kill": len(charged_lines(folder / "killed"))}
        shutil.copytree(folder / "killed", folder / "retrace")
        for mode, name in (("fast_forward", "killed"), ("retrace", "retrace")):
            cmd = argv(name)
            if mode == "retrace":
                cmd = [sys.executable, "-c", RETRACE, *cmd[3:]]
            calls, started = len(server.chat_requests()), time.monotonic()
            resumed = finish(start(cmd, env))
            row[mode] = {"rerun_s": round(time.monotonic() - started, 2),
                         "model_calls": len(server.chat_requests()) - calls,
                         "charged": resumed["charged"], "same_as_whole": _same(folder, name)}
    return row


def _same(folder: Path, name: str) -> bool:
    def result(which: str) -> Any:
        return json.loads((folder / which / "result.json").read_text())

    keys = [line["key"] for line in charged_lines(folder / name)]
    return (result(name) == result("whole") and len(keys) == len(set(keys))
            and _history(folder / name) == _history(folder / "whole"))


def refits(pulls: int) -> dict[int, dict[str, float]]:
    """Part 2 (module docstring): {pull: this refit's seconds, the sum so far}."""
    from lcb.optimize.methods.maspob import MaspobSettings
    from lcb.optimize.methods.maspob_search import Bandit, Pull

    settings, rng = MaspobSettings(), random.Random(0)
    roles = ["manager", "coder", "tester", "debugger"]
    embeddings = [[[rng.gauss(0, 1) for _ in range(384)] for _ in range(settings.pool_size)]
                  for _ in roles]
    bandit = Bandit(roles, [("manager", r) for r in roles[1:]], embeddings, settings)
    done: list[Pull] = []
    total, shown = 0.0, {}
    for n in range(1, pulls + 1):
        combo = tuple(rng.randrange(settings.pool_size) for _ in roles)
        done.append(Pull(combo=combo, rows=[f"r{i}" for i in range(5)],
                         scores=[rng.random() for _ in range(5)]))
        if n < settings.warmup:
            continue
        took = bandit.refit(done, seed=n)["seconds"]
        total += took
        if n in (10, 30, 60, pulls):
            shown[n] = {"refit_s": round(took, 3), "sum_s": round(total, 1)}
            print(f"pull {n}: refit {took:.2f} s, all refits so far {total:.1f} s", flush=True)
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="*", default=["tavo", "hivemind", "maspob"])
    parser.add_argument("--pulls", type=int, default=100, help="part 2: 0 skips it")
    args = parser.parse_args()
    cases = kill_tests()
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods:
            print(json.dumps(compare(method, cases[method], Path(tmp) / method)), flush=True)
    if args.pulls:
        refits(args.pulls)


if __name__ == "__main__":
    main()
