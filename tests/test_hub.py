"""lcb.data.hub and the eval-ID manifest, offline: huggingface_hub reads a cache laid out in tmp."""

from __future__ import annotations

import json
import warnings

import pytest
from helpers_data import FAKE_SHA, make_hub_cache, stdin_row

from lcb.data import manifest
from lcb.data.datasets import DataError, Selection, load_problems
from lcb.data.hub import REVISION_ENV, release_files
from lcb.data.manifest import EvalIdMismatch, ManifestError, check_eval_order, eval_ids

FROZEN = ("1873_A 1873_B 1873_D 1883_B 1883_C 1899_A 1899_B 1899_C 1899_D 2727 2728 2730 2754 "
          "2755 2756 2757 2777 2779 2784 2785 2786 2791 2792 2800 2802 2808 2810 2811 2812 2816 "
          "2817 2819 2824 2825 2827 2828 2831 2832 2833 2834 2837 2839 2844 2845 2847 2848 2849 "
          "2850 2854 2855").split()


def rows(*qids: str) -> list[dict]:
    return [stdin_row(q) for q in qids]


@pytest.mark.parametrize(("tag", "files"), [
    ("release_v1", ["test.jsonl"]),
    ("v1", ["test.jsonl"]),
    ("release_v3", ["test.jsonl", "test2.jsonl", "test3.jsonl"]),
    ("v4", ["test4.jsonl"]),
    ("v2_v4", ["test2.jsonl", "test3.jsonl", "test4.jsonl"]),
    ("v5_v5", ["test5.jsonl"]),
    ("release_latest", ["test.jsonl"] + [f"test{n}.jsonl" for n in range(2, 7)]),
    ("release_v6", ["test.jsonl"] + [f"test{n}.jsonl" for n in range(2, 7)]),
])
def test_release_tags_map_to_files(tag, files):
    assert release_files(tag) == files


@pytest.mark.parametrize("tag", ["release_v0", "release_v7", "v9", "v4_v2", "latest", "v1-v2",
                                 "release_v", ""])
def test_bad_release_tags_raise_with_the_valid_forms(tag):
    with pytest.raises(DataError, match=f"--release '{tag}'.*release_latest"):
        release_files(tag)


def test_hub_release_loads_cached_files_in_order_and_records_the_commit(hub_cache):
    make_hub_cache(hub_cache, {"test.jsonl": rows("a1", "a2"), "test2.jsonl": rows("b1"),
                               "test3.jsonl": rows("c1")})
    with pytest.warns(EvalIdMismatch, match="'a1'"):  # release_v2 starts with release_v1's rows
        loaded = load_problems(release="release_v2")
    assert [p.id for p in loaded.problems] == ["a1", "a2", "b1"]
    assert loaded.source == {
        "kind": "hub", "repo": "livecodebench/code_generation_lite", "release": "release_v2",
        "revision": FAKE_SHA, "requested_revision": "main",
        "files": ["test.jsonl", "test2.jsonl"],
    }
    assert [p.id for p in load_problems(release="v2_v3").problems] == ["b1", "c1"]


@pytest.mark.filterwarnings("ignore::lcb.data.manifest.EvalIdMismatch")
def test_hub_revision_comes_from_argument_or_environment(hub_cache, monkeypatch):
    other = "f" * 40
    make_hub_cache(hub_cache, {"test.jsonl": rows("main1")})
    make_hub_cache(hub_cache, {"test.jsonl": rows("old1")}, sha=other, ref="old")
    assert load_problems(revision="old").problems[0].id == "old1"
    assert load_problems(revision=other).source["revision"] == other
    monkeypatch.setenv(REVISION_ENV, "old")
    loaded = load_problems()
    assert loaded.problems[0].id == "old1"
    assert loaded.source["requested_revision"] == "old"


def test_other_hub_repo_ids_use_the_same_layout(hub_cache):
    make_hub_cache(hub_cache, {"test4.jsonl": rows("m1")}, repo_id="someone/lcb-mirror")
    loaded = load_problems("someone/lcb-mirror", release="v4")
    assert [p.id for p in loaded.problems] == ["m1"]
    assert loaded.source["repo"] == "someone/lcb-mirror"


def test_nothing_cached_while_offline_says_how_to_get_the_data(hub_cache):
    with pytest.raises(DataError) as info:
        load_problems(release="release_v1")
    message = str(info.value)
    assert "test.jsonl" in message and "livecodebench/code_generation_lite" in message
    assert "--data PATH" in message and "hf download" in message and str(hub_cache) in message


def test_a_missing_later_file_is_named(hub_cache):
    make_hub_cache(hub_cache, {"test.jsonl": rows("a1")})
    with pytest.raises(DataError, match="test2.jsonl"):
        load_problems(release="release_v2")


def test_eval_ids_are_the_frozen_fifty():
    assert eval_ids() == FROZEN
    assert json.loads(manifest.MANIFEST_PATH.read_text()) == FROZEN


@pytest.mark.parametrize(("text", "message"), [
    (None, "not found"), ("[1, 2]", "list of strings"), ("{bad", "not JSON")])
def test_a_broken_manifest_raises(tmp_path, text, message):
    path = tmp_path / "ids.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ManifestError, match=message):
        eval_ids(path)


def test_matching_release_v1_order_does_not_warn(hub_cache):
    make_hub_cache(hub_cache, {"test.jsonl": rows(*FROZEN, "2856")})
    with warnings.catch_warnings():
        warnings.simplefilter("error", EvalIdMismatch)
        assert [p.id for p in load_problems(selection=Selection(limit=50)).problems] == FROZEN
        assert len(load_problems().problems) == 51


def test_a_reordered_release_v1_warns_with_the_first_mismatch(hub_cache):
    order = list(FROZEN)
    order[3], order[4] = order[4], order[3]
    make_hub_cache(hub_cache, {"test.jsonl": rows(*order)})
    with pytest.warns(EvalIdMismatch, match="row 3 of release_v1 is '1883_C'.*'1883_B'"):
        load_problems(selection=Selection(limit=10))
    with pytest.warns(EvalIdMismatch):
        load_problems()


def test_the_check_only_covers_unfiltered_loads_from_the_first_row(hub_cache, tmp_path):
    make_hub_cache(hub_cache, {"test.jsonl": rows("x", *FROZEN)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", EvalIdMismatch)
        load_problems(selection=Selection(offset=1, limit=3))
        load_problems(selection=Selection(only=("1873_A",)))
        load_problems(selection=Selection(difficulty="easy", limit=3))
    with pytest.warns(EvalIdMismatch, match="row 0"):
        load_problems(selection=Selection(limit=1))


def test_check_eval_order_compares_only_what_was_seen():
    with warnings.catch_warnings():
        warnings.simplefilter("error", EvalIdMismatch)
        assert check_eval_order(FROZEN[:3]) is None
        assert check_eval_order([*FROZEN, "extra"]) is None
    with pytest.warns(EvalIdMismatch):
        assert "'2728'" in check_eval_order(["1873_A", "2728"])
