"""DAG-Shapley (HiveMind): exact against brute force, equal to full Shapley where the DAG
permits every coalition, and pruning exactly the coalitions the workflow cannot run."""

import itertools
import math
import random

import pytest

from lcb.optimize.graph import team_graph
from lcb.optimize.methods import dag_shapley as dag
from lcb.optimize.methods.hivemind import HivemindSettings
from lcb.optimize.methods.hivemind_game import Game
from lcb.optimize.methods.shapley import exact_shapley, power_set
from lcb.optimize.teamrun import TeamCell
from tests.optimize.test_hivemind import team_fake

CHAIN = ["a", "b", "c"]
CHAIN_ROLES = {p: p for p in CHAIN}
CHAIN_EDGES = [("a", "b"), ("b", "c")]
STAR = ["hub", "w1", "w2"]
STAR_ROLES = {p: p for p in STAR}
STAR_EDGES = [("hub", "w1"), ("hub", "w2")]


def brute_force(players, value):
    """Shapley by enumerating every order (the definition)."""
    phi = dict.fromkeys(players, 0.0)
    orders = list(itertools.permutations(players))
    for order in orders:
        before = frozenset()
        for player in order:
            phi[player] += value(before | {player}) - value(before)
            before = before | {player}
    return {p: v / math.factorial(len(players)) for p, v in phi.items()}


@pytest.mark.parametrize(("players", "roles", "edges", "viable"), [
    (CHAIN, CHAIN_ROLES, CHAIN_EDGES, [set(), {"a"}, {"a", "b"}, {"a", "b", "c"}]),
    (STAR, STAR_ROLES, STAR_EDGES, [set(), {"hub"}, {"hub", "w1"}, {"hub", "w2"},
                                    {"hub", "w1", "w2"}]),
])
def test_only_the_coalitions_the_workflow_can_run_are_viable(players, roles, edges, viable):
    upstream = dag.ancestors(players, roles, edges)
    found = [set(c) for c in power_set(players) if dag.viable(c, upstream)]
    assert sorted(map(sorted, found)) == sorted(map(sorted, viable))
    pruned = [c for c in power_set(players) if not dag.viable(c, upstream)]
    assert len(found) + len(pruned) == 2 ** len(players)
    for coalition in pruned:  # each is worth its core, a viable coalition inside it
        core = dag.core(coalition, upstream)
        assert core < coalition and dag.viable(core, upstream)


@pytest.mark.parametrize("seed", range(5))
def test_dag_shapley_is_exact_against_brute_force(seed):
    rng = random.Random(seed)
    upstream = dag.ancestors(CHAIN, CHAIN_ROLES, CHAIN_EDGES)
    measured = {c: rng.random() for c in power_set(CHAIN) if dag.viable(c, upstream)}
    values = dag.complete(CHAIN, measured, upstream)
    expected = brute_force(CHAIN, lambda c: measured[dag.core(c, upstream)])
    got = exact_shapley(CHAIN, values)
    assert got == pytest.approx(expected)
    assert sum(got.values()) == pytest.approx(measured[frozenset(CHAIN)] - measured[frozenset()])


def test_without_edges_dag_shapley_is_full_shapley():
    rng = random.Random(7)
    players = ["x", "y", "z"]
    upstream = dag.ancestors(players, {p: p for p in players}, [])
    measured = {c: rng.random() for c in power_set(players)}
    assert all(dag.viable(c, upstream) for c in measured)
    assert dag.complete(players, measured, upstream) == measured
    with pytest.raises(KeyError, match="viable coalition"):
        dag.complete(players, {}, upstream)


@pytest.mark.parametrize(("topology", "size", "full", "dag_runs", "dag_charged"), [
    ("sequential", 2, 4, 3, 1), ("sequential", 4, 16, 5, 2), ("sequential", 8, 39, 9, 5),
    ("sequential", 10, 36, 11, 5), ("centralized", 4, 8, 8, 8), ("centralized", 8, 38, 16, 16),
    ("independent", 4, 16, 16, 1), ("decentralized", 4, 16, 16, 11)])
def test_coalitions_run_per_cycle_by_topology(topology, size, full, dag_runs, dag_charged):
    """The figures of docs/optimizers/hivemind.md, cycle 1 at the standard sizes (one-role
    teams with the game on: their graph has no edges, so DAG-Shapley is full Shapley; above
    40 coalitions both sample orders, the full game's Monte-Carlo being approximate where a
    chain's DAG-Shapley stays exact): the coalitions run, and those of DAG-Shapley charged
    once the whole team's answers are reused (`lcb.teams.reuse`)."""
    cell = TeamCell(topology, size)
    graph = team_graph(cell)

    def game(mode):
        ctx = team_fake(budget=600, graph=graph, n_train=150, n_val=50,
                        seed_bundle=dict.fromkeys(graph.roles, "Solve."))
        ctx.whole_team_answers = cell.whole_team_answers  # the real team's rule
        return Game(ctx, HivemindSettings(shapley=mode, shapley_single_role=True))

    full_game, dag = game("full"), game("dag")
    assert (len(full_game.plan(1).run), len(dag.plan(1).run)) == (full, dag_runs)
    assert len(dag.charged(dag.plan(1))) == dag_charged
