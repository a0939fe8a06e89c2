"""maspob's covering warm-up (`cover_arms`, a setting) against the paper's random warm-up, in a
noisy planted world, side by side.

Run from the repository root:
  .venv/bin/python bench/maspob_cover.py [--budgets 40 60 120] [--positions 1 .. 19]
                                         [--seeds S ...] [--controls 0 1] [--jobs 1]

The world (no model, no grader: `tests.helpers_methods.FakeContext` with a noisy solver): 60
train problems. A rollout passes when a draw keyed by (bundle, problem, iteration) falls under
the pass rate of the answering role's text, so every pull is noisy and a rerun is reproducible.
The seed text passes 35 %, each plain variant 32-38 % (by a hash of its text), and the one good
variant 65 % (`--good-rate`). Pools come from maspob's own variants request, answered by a
script that rewrites the seed once per style line and writes the good text at one pool position
of the answering role (one run at each of `--positions`, 1-19 by default, so that a pool cut
to k texts holds it in (k - 1) of 19 runs, as often as a uniformly placed good variant would
be; variant k of a pool follows style k). Every run uses maspob's defaults (pools of 20, pulls
of 5 rows, the gate) with `cover_arms` on and off, on a one-role team (decentralized:
`debater`) and a two-role one (sequential: `coder` then `debugger`, the answering role); the
default `auto` is the one of the two it picks at each budget (its totals are printed last).
Control runs (`--controls`, their optimizer seeds) plant no good variant. Printed per team,
budget and setting, summed over positions and seeds: the pool size per role, pulls
made, distinct combinations pulled other than the seed's, runs whose pools held the good
variant, runs that pulled it and runs that deployed it (the bundle `optimize` returned, after
the gate); and for the controls, runs that adopted a plain variant. The embeddings are the
tests' hashing embedder (`FakeContext.embed`), which carries no signal about a text's quality:
the surrogate cannot tell the good variant from its text."""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import hashlib
import logging
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lcb.agents.prompts import seed_bundle  # noqa: E402
from lcb.optimize.bundle import bundle_hash  # noqa: E402
from lcb.optimize.methods.maspob import MaspobSettings, make  # noqa: E402
from lcb.optimize.methods.maspob_cover import affordable_pulls, plan_pools  # noqa: E402
from lcb.optimize.methods.maspob_pool import STYLES  # noqa: E402
from lcb.optimize.teamrun import TeamCell  # noqa: E402
from tests.helpers_methods import FakeContext, FakeData, make_problem  # noqa: E402
from tests.optimize.test_maspob import variants_reply  # noqa: E402

GOOD = "Before answering, trace every example of the statement by hand."
SEED_RATE, GOOD_RATE, PLAIN_SPREAD = 0.35, 0.65, 0.06
TEAMS = {"decentralized": "debater", "sequential": "debugger"}  # topology -> answering role
TRAIN = 60
_ITERATION = contextvars.ContextVar("iteration", default=0)


def uniform(*key: object) -> float:
    """A reproducible draw in [0, 1) from `key`."""
    digest = hashlib.sha256("|".join(map(str, key)).encode()).hexdigest()
    return int(digest[:12], 16) / 16 ** 12


@dataclass
class NoisyContext(FakeContext):
    """FakeContext whose rollouts pass by a keyed draw under the answering text's rate."""

    seed_text: str = ""
    good_rate: float = GOOD_RATE

    def rate(self, text: str) -> float:
        if GOOD in text:
            return self.good_rate
        if text == self.seed_text:
            return SEED_RATE
        return SEED_RATE + PLAIN_SPREAD * (uniform("plain", text) - 0.5)

    async def rollout(self, bundle, problem, *, iteration, active=None):
        _ITERATION.set(iteration)  # this task's own copy: read by `solves` below
        return await super().rollout(bundle, problem, iteration=iteration, active=active)

    def solves(self, bundle, problem) -> bool:
        draw = uniform(bundle_hash(dict(bundle)), problem.id, _ITERATION.get())
        return draw < self.rate(bundle[self.target_role])


def variants_script(target: str, position: int | None):
    """maspob's variants request answered; variant `position` of `target` holds `GOOD`."""
    def marked(role: str):
        return lambda number, style: (role == target and position is not None
                                      and STYLES.index(style) == position - 1)

    def script(prompt: str, purpose: str) -> str:
        role = purpose.rsplit(":", 1)[1]
        reply = variants_reply(prompt, GOOD, marked(role))
        assert reply is not None, "not a variants request"
        return reply
    return script


@dataclass
class Outcome:
    pool: int
    pulls: int
    combos: int
    good_in_pool: bool
    good_pulled: bool
    deployed: bool
    plain_adopted: bool


def one_run(topology: str, budget: int, *, cover: bool, position: int | None, seed: int,
            good_rate: float = GOOD_RATE) -> Outcome:
    cell = TeamCell(topology, 2)
    target = TEAMS[topology]
    bundle = seed_bundle(topology, cell.roles)
    ctx = NoisyContext(seed_bundle=bundle, budget=budget, target_role=target,
                       data=FakeData(tuple(make_problem(i) for i in range(TRAIN)), ()),
                       script=variants_script(target, position), topology=topology,
                       team_size=2, optimizer_seed=seed, seed_text=bundle[target],
                       good_rate=good_rate)
    result = asyncio.run(make(cover_arms=cover).optimize(ctx))
    state = ctx.checkpoints[-1]["state"]
    combos = [tuple(p["combo"]) for p in state["pulls"]]
    index = list(cell.roles).index(target)
    pool = state["pools"][target]
    good = next((i for i, text in enumerate(pool) if GOOD in text), None)
    changed = dict(result) != dict(bundle)
    pulled = set(combos) - {(0,) * len(cell.roles)}
    return Outcome(pool=len(pool), pulls=len(combos), combos=len(pulled),
                   good_in_pool=good is not None,
                   good_pulled=good is not None and any(c[index] == good for c in combos),
                   deployed=GOOD in result[target],
                   plain_adopted=changed and GOOD not in result[target])


Setting = tuple[str, int, bool]  # topology, budget, cover_arms


def run_all(settings: list[Setting], runs: list[tuple[int | None, int]], jobs: int,
            good_rate: float) -> dict[tuple, Outcome]:
    """Every (setting, position, seed) run, `jobs` processes at a time (None: the control)."""
    keys = [(*setting, position, seed, good_rate) for setting in settings
            for position, seed in runs]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        outcomes = pool.map(_run_key, keys)
        return dict(zip(keys, outcomes, strict=True))


def _run_key(key: tuple) -> Outcome:
    topology, budget, cover, position, seed, good_rate = key
    return one_run(topology, budget, cover=cover, position=position, seed=seed,
                   good_rate=good_rate)


def row(setting: Setting, runs: list[Outcome], controls: list[Outcome]) -> str:
    topology, budget, cover = setting
    n = len(runs)
    pulls = sorted({r.pulls for r in runs})
    combos = sum(r.combos for r in runs) / n
    roles = len(TeamCell(topology, 2).roles)
    return (f"| {topology} ({roles} role{'s' if roles > 1 else ''}) | {budget} | "
            f"{'on' if cover else 'off'} | {runs[0].pool} | {'-'.join(map(str, pulls))} | "
            f"{combos:.1f} | {sum(r.good_in_pool for r in runs)}/{n} | "
            f"{sum(r.good_pulled for r in runs)}/{n} | "
            f"{sum(r.deployed for r in runs)}/{n} | "
            f"{sum(r.plain_adopted for r in controls)}/{len(controls)} |")


def auto_covers(budget: int) -> bool:
    """Whether `cover_arms="auto"` covers at `budget` with maspob's defaults (its `_plan`)."""
    s = MaspobSettings()
    pulls = affordable_pulls(budget, rows=s.rows_per_pull, reserve=2 * s.rows_per_pull,
                             max_pulls=s.max_pulls)
    return plan_pools(pulls=pulls, cap=s.pool_size, cover="auto").cover


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="*", default=[40, 60, 120])
    parser.add_argument("--positions", type=int, nargs="*", default=list(range(1, 20)),
                        help="pool positions of the good variant (default: each of 1-19)")
    parser.add_argument("--seeds", type=int, nargs="*", default=None,
                        help="optimizer seeds, each run at every position (default: one run "
                             "a position, its seed the position)")
    parser.add_argument("--controls", type=int, nargs="*", default=[0, 1],
                        help="optimizer seeds of the control runs (no good variant)")
    parser.add_argument("--teams", nargs="*", default=list(TEAMS))
    parser.add_argument("--good-rate", type=float, default=GOOD_RATE,
                        help="the good variant's pass rate")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    settings = [(t, b, c) for t in args.teams for b in args.budgets for c in (True, False)]
    planted = ([(p, p) for p in args.positions] if args.seeds is None
               else [(p, s) for p in args.positions for s in args.seeds])
    controls = [(None, s) for s in args.controls]
    outcomes = run_all(settings, planted + controls, args.jobs, args.good_rate)
    seeds = "each the position's number" if args.seeds is None else str(args.seeds)
    print(f"good variant at pool positions {args.positions}, optimizer seeds {seeds}; "
          f"controls' seeds {args.controls}; {TRAIN} train problems; pass rates: seed "
          f"{SEED_RATE:.0%}, plain variants {SEED_RATE - PLAIN_SPREAD / 2:.0%}-"
          f"{SEED_RATE + PLAIN_SPREAD / 2:.0%}, good {args.good_rate:.0%}\n")
    print("| team | budget | cover_arms | pool per role | pulls | combinations pulled (mean) "
          "| good variant in the pool | pulled | deployed | control: plain variant adopted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    totals: dict[str, list[int]] = {"on": [0, 0], "off": [0, 0], "auto": [0, 0]}
    for setting in settings:
        runs = [outcomes[(*setting, p, s, args.good_rate)] for p, s in planted]
        control = [outcomes[(*setting, p, s, args.good_rate)] for p, s in controls]
        print(row(setting, runs, control))
        modes = ["on" if setting[2] else "off"]
        if auto_covers(setting[1]) == setting[2]:
            modes.append("auto")
        for mode in modes:
            totals[mode][0] += sum(r.deployed for r in runs)
            totals[mode][1] += len(runs)
    for mode, (deployed, n) in totals.items():
        print(f"\ncover_arms {mode}: deployed {deployed}/{n}", end="")
    print(f"\n(auto covers at budgets {[b for b in args.budgets if auto_covers(b)]}, where the "
          f"whole pool fits; its runs are those of the setting it picks)", end="")
    print(f"\n\n{len(outcomes)} runs in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
