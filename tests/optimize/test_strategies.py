"""The shared strategies of the native methods (`lcb.optimize.strategies`), exactly.

Batch samplers: pinned draws for fixed seeds, and the same rows as the inline code each method
used before it moved to them (so a seed keeps drawing the rows it drew). The paired gate: which
rows count, the means, ties and lost rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from lcb.optimize.strategies.batches import (
    Rotation,
    draw,
    fill,
    ordered_subset,
    seeded_rng,
    shuffled,
)
from lcb.optimize.strategies.gates import Paired, pair, scores_of, strictly_better

ROWS = list("abcdefgh")


@dataclass(frozen=True)
class Row:
    id: str


@dataclass(frozen=True)
class Result:
    score: float


# ------------------------------------------------------------------ batches: exact draws
def test_seeded_rng_joins_its_parts_with_colons() -> None:
    assert seeded_rng("hivemind", 0, "train").getstate() == \
        random.Random("hivemind:0:train").getstate()
    assert seeded_rng("maspob", "rows", 42).getstate() == random.Random("maspob:rows:42").getstate()


def test_draw_pins_its_rows_and_caps_k_at_the_rows_there_are() -> None:
    assert draw(ROWS, 3, seeded_rng("tavo", 0)) == ["d", "a", "b"]
    rng = seeded_rng("tavo", 0)  # one RNG, two draws: the second goes on from the first
    assert (draw(ROWS, 3, rng), draw(ROWS, 2, rng)) == (["d", "a", "b"], ["f", "d"])
    assert sorted(draw(ROWS, 99, seeded_rng("x"))) == ROWS
    assert draw([], 3, seeded_rng("x")) == []


def test_two_random_orders_a_method_must_not_swap() -> None:
    assert draw(ROWS, len(ROWS), seeded_rng("maspob", "rows", 42)) == list("fahecbgd")
    assert shuffled(ROWS, seeded_rng("maspob", "rows", 42)) == list("dgbcehaf")


def test_shuffled_leaves_its_input_alone() -> None:
    rows = list(ROWS)
    shuffled(rows, seeded_rng("x"))
    assert rows == ROWS


def test_ordered_subset_keeps_the_original_order_and_needs_no_rng_for_everything() -> None:
    assert ordered_subset(ROWS, 3, seeded_rng("mapro", 0)) == ["a", "b", "g"]
    rng = seeded_rng("mapro", 0)
    before = rng.getstate()
    assert ordered_subset(ROWS, None, rng) == ROWS
    assert ordered_subset(ROWS, 8, rng) == ordered_subset(ROWS, 50, rng) == ROWS
    assert rng.getstate() == before


def test_fill_puts_the_given_rows_first_and_draws_the_rest_from_the_others() -> None:
    rows = [Row(c) for c in ROWS]
    batch = fill([rows[5], rows[2]], rows, 5, seeded_rng("maspo", 0))
    assert [r.id for r in batch] == ["f", "c", "e", "b", "h"]
    assert [r.id for r in fill([], rows, 2, seeded_rng("maspo", 0))] == \
        [r.id for r in draw(rows, 2, seeded_rng("maspo", 0))]
    assert fill(rows[:3], rows, 3, seeded_rng("maspo", 0)) == rows[:3]


def test_rotation_wraps_around_and_caps_its_size() -> None:
    rotation = Rotation.over("abcde", 2)
    assert [rotation.batch(k) for k in range(4)] == [["a", "b"], ["c", "d"], ["e", "a"],
                                                     ["b", "c"]]
    assert rotation.at(4) == ["e", "a"] and rotation.at(7) == ["c", "d"]
    assert Rotation.over("ab", 5).batch(1) == ["a", "b"]
    assert Rotation.over((), 5).batch(3) == []


# ------------------------------------------------------------------ batches: as the methods drew
@pytest.mark.parametrize("seed", [0, 1, 2, 7])
def test_each_method_draws_the_rows_its_inline_code_drew(seed: int) -> None:
    train, val = [f"t{i}" for i in range(150)], [f"v{i}" for i in range(50)]
    # tavo: one RNG, the train batch then the validation batch
    old = random.Random(f"tavo:{seed}")
    rng = seeded_rng("tavo", seed)
    assert draw(train, 6, rng) == old.sample(train, min(6, len(train)))
    assert draw(val, 20, rng) == old.sample(val, 20)
    # hivemind: shuffled copies, a rotating pass of 5 over train, the first 5 of val
    old_train = list(train)
    random.Random(f"hivemind:{seed}:train").shuffle(old_train)
    order = shuffled(train, seeded_rng("hivemind", seed, "train"))
    assert order == old_train
    for cycle in (1, 2, 30, 31, 77):
        assert Rotation.over(order, 5).batch(cycle - 1) == \
            [old_train[((cycle - 1) * 5 + j) % 150] for j in range(5)]
    # maspob: a draw of every row, a rotating window from a cursor
    old_order = random.Random(f"maspob:rows:{42 + 1000 * seed}").sample(train, len(train))
    order = draw(train, len(train), seeded_rng("maspob", "rows", 42 + 1000 * seed))
    assert order == old_order
    assert Rotation.over(order, 5).at(148) == [old_order[(148 + i) % 150] for i in range(5)]
    # mapro: indices drawn, rows kept in train order
    picked = random.Random(f"mapro:{seed}").sample(range(150), 12)
    assert ordered_subset(train, 12, seeded_rng("mapro", seed)) == \
        [train[i] for i in sorted(picked)]
    # maspo: mined rows first, then draws from the rest, the RNG going on across minibatches
    rows = [Row(t) for t in train]
    old, rng = random.Random(f"maspo:{seed}"), seeded_rng("maspo", seed)
    for taken in ([], ["t3", "t140"], ["t9"]):
        first = [row for row in rows if row.id in taken]
        rest = [row for row in rows if row.id not in taken]
        assert fill(first, rows, 10, rng) == first + old.sample(rest, 10 - len(first))


# ------------------------------------------------------------------ the paired gate
def test_pair_keeps_the_rows_every_side_scored_in_order() -> None:
    paired = pair({"a": 1.0, "b": None, "c": 0.0, "d": 1.0}, {"a": 0.0, "c": 1.0, "d": 1.0},
                  {"a": 1.0, "b": 1.0, "c": None, "d": 0.0})
    assert paired == Paired(rows=("a", "d"), values=((1.0, 1.0), (0.0, 1.0), (1.0, 0.0)),
                            missing=("b", "c"))
    assert (paired.mean(0), paired.mean(1), paired.mean(2)) == (1.0, 0.5, 0.5)
    ordered = pair({"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 1.0, "z": 1.0}, order=["z", "b", "a"])
    assert (ordered.rows, ordered.missing) == (("b", "a"), ("z",))


def test_no_paired_row_means_zero_and_no_adoption() -> None:
    paired = pair({"a": None}, {"a": 1.0, "b": 0.0})
    assert (paired.rows, paired.mean(0), paired.mean(1)) == ((), 0.0, 0.0)
    gate = strictly_better({"a": 1.0}, {"b": 0.0})
    assert not gate.adopted and gate.paired.rows == () and gate.paired.missing == ("a",)


def test_strictly_better_on_the_same_rows_only() -> None:
    gate = strictly_better({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 0.0, "b": 1.0, "c": 0.0})
    assert gate.adopted and (gate.candidate, gate.incumbent) == (2 / 3, 1 / 3)
    tie = strictly_better({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0})
    assert not tie.adopted and tie.candidate == tie.incumbent == 0.5
    # the candidate solves a row the incumbent lost to infrastructure: no evidence either way
    lost = strictly_better({"a": 1.0, "b": 0.0}, {"a": None, "b": 0.0})
    assert not lost.adopted and lost.paired.rows == ("b",)
    worse = strictly_better({"a": 0.0}, {"a": 1.0})
    assert not worse.adopted and (worse.candidate, worse.incumbent) == (0.0, 1.0)


def test_scores_of_lines_results_up_with_their_rows() -> None:
    rows = [Row("p1"), Row("p2"), Row("p3")]
    assert scores_of(rows, [Result(1.0), None, Result(0.0)]) == \
        {"p1": 1.0, "p2": None, "p3": 0.0}
    with pytest.raises(ValueError):
        scores_of(rows, [Result(1.0)])
