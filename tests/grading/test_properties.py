"""Property-based tests (hypothesis) of the rules other code leans on: the stdout comparison
against LiveCodeBench's own code, the value channel's round trip, the extraction rule, pass@k
against brute force and Holm's correction.

Each property runs a bounded number of examples (`FAST`: well under 2 s a test on a loaded
machine) with no example database, so a run writes no files; a failure prints the smallest
example hypothesis found and the seed to reproduce it.
"""

from __future__ import annotations

import math
import re
import sys
import types
from contextlib import ExitStack
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from itertools import combinations
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lcb.extract import extract_code
from lcb.grading.compare import stdout_matches
from lcb.sandbox.official_child import require_official
from lcb.sandbox.values import UnequalDict, decode, encode
from lcb.stats import KS, estimate_pass_at_k, holm, pass_at_k

FAST = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


# --- the stdout comparison against LiveCodeBench's grade_stdio ------------------------------
def official_matches(actual: str, expected: str) -> bool:
    """LiveCodeBench's `grade_stdio` verdict for a program that printed `actual`.

    No program runs: the compiled solution is a stand-in whose `wrapped_function` writes
    `actual` to the stdout that `grade_stdio` captures; everything after it (the line split,
    the strip, the Decimal comparison) is LiveCodeBench's own code. Its alarm and faulthandler
    calls are stubbed, so it leaves pytest's own (and pytest-timeout's) untouched."""
    pytest.importorskip("livecodebench.evaluation.testing_util")
    util = require_official()  # imported without raising the process's int-digits limit
    program = types.SimpleNamespace(wrapped_function=lambda: sys.stdout.write(actual))
    quiet = types.SimpleNamespace(alarm=lambda seconds: 0, enable=lambda: None,
                                  disable=lambda: None)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(util, "compile_code", lambda code, t: program))
        stack.enter_context(mock.patch.object(util, "signal", quiet))
        stack.enter_context(mock.patch.object(util, "faulthandler", quiet))
        try:
            results, _ = util.grade_stdio("pass", [""], [expected], 6)
        except InvalidOperation:  # "sNaN" refuses comparison; `run_test`, which calls
            return False  # `grade_stdio`, turns the exception into a failed test (-4)
    return results == [True]


NUMBERS = st.one_of(
    st.integers(-10**20, 10**20).map(Decimal),
    st.floats(allow_nan=False, allow_infinity=True, width=64).map(lambda x: Decimal(repr(x))),
    st.decimals(allow_nan=False, allow_infinity=True, places=None),
    st.sampled_from([Decimal("0.1"), Decimal("-0"), Decimal("1E+5"), Decimal("1e-7"),
                     Decimal(10**17)]),
)


def spellings(number: Decimal) -> list[str]:
    """Ways a program or a test file may write `number`, all equal as Decimals: Decimal's own
    text, fixed and exponent forms, trailing zeros, a sign, `inf` for `Infinity`."""
    if number.is_infinite():
        sign = "-" if number < 0 else ""
        return [f"{sign}{word}" for word in ("Infinity", "inf", "INF")] + (
            [] if sign else ["+inf"])
    fixed = f"{number:f}"
    return sorted({str(number), f"{number:e}", f"{number:E}", fixed, f"{number:+f}",
                   fixed + ("00" if "." in fixed else ".00")})


WORDS = st.sampled_from(["Yes", "No", "YES", "nan", "NaN", "sNaN", "1_000", "١٢", "0x10", ".5",
                         "5.", "abc", "+", "e", "-"])
SPACE = st.sampled_from([" ", "  ", "\t", " \t ", "\u00a0", "\u2003", "\x0b", "\x0c", "\x1c"])
LINE_END = st.sampled_from(["\n", "\r\n", "\n\n", " \n", "\n \n"])


@st.composite
def outputs(draw: st.DrawFn) -> tuple[str, str]:
    """(program output, expected output): the same lines of tokens, each side spelling every
    number and laying out whitespace, blank lines and line ends its own way; then sometimes
    one number is a near miss (its Decimal successor: equal as floats, not as Decimals), or a
    token, a line or a separator changes on one side."""
    lines = draw(st.lists(st.lists(st.one_of(NUMBERS, WORDS), max_size=4), max_size=4))
    numbers = [(i, j) for i, tokens in enumerate(lines) for j, token in enumerate(tokens)
               if isinstance(token, Decimal) and token.is_finite()]
    near = draw(st.sampled_from(numbers)) if numbers and draw(st.booleans()) else None

    def render(side: str) -> str:
        rows = []
        for i, tokens in enumerate(lines):
            cells = [token if isinstance(token, str) else
                     str(token.next_plus()) if side == "expected" and (i, j) == near else
                     draw(st.sampled_from(spellings(token))) for j, token in enumerate(tokens)]
            row = draw(SPACE).join(cells) if draw(st.booleans()) else " ".join(cells)
            rows.append(draw(st.sampled_from(["", " ", "\t"])) + row
                        + draw(st.sampled_from(["", " ", "\r"])))
        text = "".join(row + draw(LINE_END) for row in rows)
        return draw(st.sampled_from(["", "\n", " \n\n"])) + text + draw(
            st.sampled_from(["", "\n", "\n\n", "  "]))

    actual, expected = render("actual"), render("expected")
    if draw(st.integers(0, 4)) == 0:  # a wrong answer
        expected = draw(st.sampled_from([expected + "\n0", expected.replace("1", "2", 1),
                                         expected.replace(" ", "", 1), "0\n" + expected,
                                         expected.replace("\n", " ", 1)]))
    return actual, expected


@settings(FAST, max_examples=100)  # each example builds LiveCodeBench's mock_open: ~10 ms
@given(outputs())
@example(("1e5 -0 1", "100000 0 1.0"))
@example(("1.5000\n", "1.5"))
@example(("1.500000001", "1.5"))
@example(("100000000000000000", "100000000000000001"))
@example(("Yes  No", "Yes No"))
@example(("NaN", "NaN"))
@example(("sNaN", "1"))
@example(("1\n\n2", "1\n2"))
@example(("Yes\n  No\t", "Yes\nNo"))
@example(("1\x0b2\r\n3", "1 2\n3"))
def test_stdout_comparison_agrees_with_livecodebench(pair):
    actual, expected = pair
    assert stdout_matches(actual, expected) == official_matches(actual, expected)


BLANKS = "\n\r\t \x0b\x0c\x1c\x1d\x1e\x85\u00a0\u2028\u3000"
TEXT = st.text(alphabet="0123456789.-+eEnaNIfyY" + BLANKS, max_size=24)


@st.composite
def relaid(draw: st.DrawFn, text: str) -> str:
    """`text` with each run of whitespace (line breaks included) written anew, and whitespace
    added or dropped at the ends."""
    runs = re.split(f"([{BLANKS}]+)", text)
    blank = st.text(alphabet=BLANKS, min_size=1, max_size=3)
    body = "".join(draw(blank) if index % 2 else part for index, part in enumerate(runs))
    edge = st.text(alphabet=BLANKS, max_size=3)
    return draw(edge) + body + draw(edge)


@FAST
@given(st.data(), TEXT, st.booleans())
def test_stdout_comparison_agrees_on_arbitrary_text(data, actual, independent):
    expected = data.draw(TEXT if independent else relaid(actual))
    assert stdout_matches(actual, expected) == official_matches(actual, expected)


# --- the value channel: encode then decode gives the value back ------------------------------
ATOMS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-2**80, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(exclude_categories=()), max_size=8),
)
KEYS = st.one_of(st.sampled_from(["tuple", "dict", "int", ""]), st.text(max_size=6))
VALUES = st.recursive(ATOMS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.tuples(inner) | st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(KEYS, inner, max_size=4),
), max_leaves=20)


def same(a: object, b: object) -> bool:
    """Equal value and type all the way down (NaN equals NaN, 0.0 and -0.0 differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a)
                                                    == math.copysign(1, b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


@FAST
@given(VALUES)
@example(2**64)
@example(-(2**64))
@example({"tuple": [1]})
@example(((1, [2.5, None]), {"a": (True,)}))
def test_values_round_trip_with_their_types(value):
    assert same(decode(encode(value)), value)


@FAST
@given(st.dictionaries(st.one_of(st.integers(), st.booleans(), st.none(), st.tuples(st.integers())),
                       ATOMS, min_size=1, max_size=4))
def test_a_dict_with_a_key_that_is_no_string_equals_nothing(value):
    decoded = decode(encode(value))
    assert isinstance(decoded, UnequalDict) and decoded != value and decoded != decoded


# --- the extraction rule ---------------------------------------------------------------------
PROSE_LINE = st.text(alphabet=st.characters(exclude_characters="`~<\r\n",
                                            exclude_categories=("Cs", "Zl", "Zp", "Cc")),
                     max_size=30)
PROSE = st.lists(PROSE_LINE, max_size=3).map("\n".join)
LABELS = st.sampled_from(["python", "Python", "PY", "py3", "python3", "python3.11"])


def program(n: int) -> str:
    return f"answer_{n} = {n}\nprint(answer_{n})"


def fence(code: str, label: str, *, indent: str = "", ticks: str = "```") -> str:
    body = "\n".join(indent + line for line in code.split("\n"))
    return f"{indent}{ticks}{label}\n{body}\n{indent}{ticks}"


@st.composite
def completions(draw: st.DrawFn) -> tuple[list[str], list[str], int]:
    """(prose pieces, fenced blocks, index of the last python-labelled block): a completion is
    prose, block, prose, block, ..., prose; every block a distinct program."""
    n = draw(st.integers(1, 4))
    labels = [draw(st.one_of(LABELS, st.just(""))) for _ in range(n)]
    if all(not label for label in labels):
        labels[draw(st.integers(0, n - 1))] = draw(LABELS)
    indent = draw(st.sampled_from(["", "  ", "   "]))
    ticks = draw(st.sampled_from(["```", "````", "~~~"]))
    blocks = [fence(program(i), label, indent=indent, ticks=ticks)
              for i, label in enumerate(labels)]
    prose = [draw(PROSE) for _ in range(n + 1)]
    return prose, blocks, max(i for i, label in enumerate(labels) if label)


def join(prose: list[str], blocks: list[str]) -> str:
    """The completion: prose, then each block followed by more prose."""
    parts = [prose[0]]
    for block, after in zip(blocks, prose[1:], strict=True):
        parts += [block, after]
    return "\n".join(parts)


@FAST
@given(completions())
def test_the_last_python_block_wins_over_bare_ones(case):
    prose, blocks, last_python = case
    assert extract_code(join(prose, blocks)) == program(last_python)


@FAST
@given(completions(), st.data())
def test_text_outside_fences_never_changes_the_result(case, data):
    prose, blocks, _ = case
    other = [data.draw(PROSE) for _ in prose]
    assert extract_code(join(other, blocks)) == extract_code(join(prose, blocks))


@FAST
@given(completions(), st.sampled_from(["\r\n", "\r"]), st.booleans())
def test_line_endings_and_reasoning_do_not_change_the_result(case, newline, think):
    prose, blocks, _ = case
    text = join(prose, blocks)
    changed = text.replace("\n", newline)
    if think:  # a reasoning block holding a later program is dropped
        changed = f"<think>{fence(program(99), 'python')}</think>\n" + changed
    assert extract_code(changed) == extract_code(text)


@FAST
@given(completions())
def test_a_closed_block_beats_a_cut_off_final_block(case):
    prose, blocks, last_python = case
    cut_off = "```python\n" + program(77)  # the model stopped before its closing fence
    assert extract_code(join(prose, blocks) + "\n" + cut_off) == program(last_python)
    assert extract_code(prose[0] + "\n" + cut_off) == program(77)


def test_an_indented_fence_on_the_first_line_keeps_its_program():
    # Found by the properties above: the answer's leading whitespace was stripped before the
    # blocks were found, so the fence lost its indentation and its lines kept theirs.
    assert extract_code(fence(program(1), "python", indent="  ")) == program(1)


# --- pass@k against every subset --------------------------------------------------------------
def brute_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The share of the k-subsets of n programs (the first c pass) holding a passing one."""
    subsets = list(combinations(range(n), k))
    return Fraction(sum(1 for s in subsets if any(i < c for i in s)), len(subsets))


@FAST
@given(st.integers(1, 10).flatmap(lambda n: st.tuples(
    st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_share_of_subsets_with_a_pass(nck):
    n, c, k = nck
    assert estimate_pass_at_k(n, c, k) == float(brute_pass_at_k(n, c, k))


@FAST
@given(st.dictionaries(st.text(max_size=3), st.lists(st.integers(0, 1), min_size=1, max_size=11),
                       min_size=1, max_size=5))
def test_pass_at_k_over_problems_averages_the_brute_force(ems):
    outcomes = [(pid, em) for pid, programs in ems.items() for em in programs]
    fewest = min(len(programs) for programs in ems.values())
    found = pass_at_k(outcomes)
    assert set(found) == {str(k) for k in KS if k <= fewest}
    for key, value in found.items():
        want = [brute_pass_at_k(len(p), sum(p), int(key)) for p in ems.values()]
        assert math.isclose(value, float(sum(want) / len(want)), rel_tol=1e-12)


# --- Holm's correction ------------------------------------------------------------------------
P_VALUES = st.lists(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.01, 0.05, 0.5, 1.0])),
                    max_size=12)


@FAST
@given(P_VALUES)
@example([0.02, 0.021])
@example([0.6, 0.6, 0.01])
def test_holm_is_monotone_at_least_raw_and_at_most_one(pvalues):
    adjusted = holm(pvalues)
    assert len(adjusted) == len(pvalues)
    for raw, adj in zip(pvalues, adjusted, strict=True):
        assert raw <= adj <= 1.0
    for i, j in combinations(range(len(pvalues)), 2):
        if pvalues[i] <= pvalues[j]:
            assert adjusted[i] <= adjusted[j]
        if pvalues[j] <= pvalues[i]:
            assert adjusted[j] <= adjusted[i]
    if pvalues:  # the smallest is Bonferroni's
        assert min(adjusted) == min(1.0, len(pvalues) * min(pvalues))
