"""lcb.data.hub and the eval-ID manifest, offline: huggingface_hub reads a cache laid out in tmp,
and an unreachable hub is a closed port on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from helpers_data import FAKE_SHA, make_hub_cache, stdin_row

from lcb.data import manifest
from lcb.data.datasets import DataError, Selection, load_problems
from lcb.data.hub import OFFLINE_HINT, REVISION_ENV, connect_problem, release_files
from lcb.data.manifest import EvalIdMismatch, ManifestError, check_eval_order, eval_ids

REPO = Path(__file__).resolve().parents[2]
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


# --- an unreachable hub fails fast ------------------------------------------------------------
def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def unreachable_hub(hub_cache, monkeypatch):
    """Online mode, but the hub endpoint is a closed local port; no proxy."""
    from huggingface_hub import constants

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    return hub_cache


def test_an_unreachable_hub_fails_in_seconds_with_the_message(unreachable_hub):
    started = time.monotonic()
    with pytest.raises(DataError) as info:
        load_problems(release="release_v1")
    assert time.monotonic() - started < 5  # huggingface_hub alone retries for about 24 s
    message = str(info.value)
    assert "the hub is unreachable (cannot connect to 127.0.0.1:" in message
    assert "Connection refused" in message and "hf download" in message


def test_an_unreachable_hub_still_serves_cached_files_at_once(unreachable_hub):
    make_hub_cache(unreachable_hub, {"test.jsonl": rows("a1"), "test2.jsonl": rows("b1")})
    started = time.monotonic()
    with pytest.warns(EvalIdMismatch):  # the check of release_v1's order still runs
        loaded = load_problems(release="v1_v2")
    assert time.monotonic() - started < 5
    assert [p.id for p in loaded.problems] == ["a1", "b1"]
    assert loaded.source["revision"] == FAKE_SHA


def test_connect_problem_goes_through_the_proxy_for_the_scheme(monkeypatch):
    port = closed_port()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        assert connect_problem(f"http://127.0.0.1:{open_port}") is None
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        problem = connect_problem("https://hub.invalid")
        assert problem == f"cannot connect to 127.0.0.1:{port}: Connection refused"
        monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{open_port}")  # no scheme: still a proxy
        assert connect_problem("https://hub.invalid") is None


def test_the_cli_fails_fast_when_hf_endpoint_is_a_closed_port(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")
           and k not in ("HF_HUB_OFFLINE", REVISION_ENV)}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from lcb.cli import main; main()", "problems"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert time.monotonic() - started < 15  # start-up included; the hub alone took 24-29 s
    assert done.returncode == 2, done.stderr
    assert "the hub is unreachable (cannot connect to 127.0.0.1:" in done.stderr
    assert "Traceback" not in done.stderr and "Retrying" not in done.stderr


# --- every hub error names the offline way in -------------------------------------------------
HUB_ERRORS = ("RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError",
              "HfHubHTTPError", "LocalEntryNotFoundError")


def _raising(name: str):
    """An hf_hub_download stand-in raising huggingface_hub's `name` (built without a response)."""
    from huggingface_hub import errors

    cls = getattr(errors, name)

    def download(*args, **kwargs):
        raise cls.__new__(cls, f"{name} from the stand-in")
    return download


@pytest.mark.parametrize("name", HUB_ERRORS)
def test_every_download_error_names_the_sample_set(hub_cache, monkeypatch, name):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _raising(name))
    with pytest.raises(DataError) as info:
        load_problems(release="release_v1")
    assert str(info.value).endswith(OFFLINE_HINT) and "--data sample" in OFFLINE_HINT


def test_bad_tags_and_an_empty_cache_name_the_sample_set(hub_cache):
    for load in (lambda: release_files("release_v9"), lambda: release_files("v3_v1"),
                 lambda: load_problems(release="release_v1")):
        with pytest.raises(DataError, match="--data sample"):
            load()
