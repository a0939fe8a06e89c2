"""Method settings: `--set key=value` parsing, checking against the method's settings dataclass,
the full record in job.json, and the CLI's exit 2 on a bad setting."""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from lcb.cli.optimize_cmd import _entry_app
from lcb.optimize.methods import gepa_method, get_optimizer, mipro_method, resolve_settings
from lcb.optimize.methods.reflection import ReflectionSettings, SliceLimits
from lcb.optimize.settings import (
    SettingsError,
    build,
    known_keys,
    parse_assignments,
    resolve,
    settings_class,
)


def test_assignments_are_json_else_strings():
    assert parse_assignments(["a=4", "b.c=0.5", "d=true", "e=abc", "f=[1, 2]", "g=",
                              "h=x=y"]) == {"a": 4, "b.c": 0.5, "d": True, "e": "abc",
                                            "f": [1, 2], "g": "", "h": "x=y"}
    for bad in ("minibatch", "=3"):
        with pytest.raises(SettingsError, match="key=value"):
            parse_assignments([bad])


def test_each_method_module_exposes_its_settings_class():
    assert settings_class(gepa_method.make) is gepa_method.GepaSettings
    assert settings_class(mipro_method.make) is mipro_method.MiproSettings
    assert settings_class(lambda: None) is None  # a module without SETTINGS takes none


def test_the_resolved_settings_are_the_full_defaults_with_overrides():
    defaults = dataclasses.asdict(gepa_method.GepaSettings())
    assert resolve_settings("gepa") == defaults
    resolved = resolve_settings("gepa", {"reflection.records_per_reflection": 5,
                                         "reflection.limits": {"clip_chars": 900},
                                         "minibatch": 4})
    expected = gepa_method.GepaSettings(minibatch=4, reflection=ReflectionSettings(
        records_per_reflection=5, limits=SliceLimits(clip_chars=900)))
    assert resolved == dataclasses.asdict(expected) != defaults
    assert resolve_settings("identity") == {}


def test_the_factory_gets_nested_dataclasses_built_from_dicts():
    optimizer = get_optimizer("gepa", **resolve_settings("gepa", {"reflection.limits."
                                                                  "max_messages": 3}))
    assert optimizer.settings.reflection == ReflectionSettings(limits=SliceLimits(max_messages=3))
    partial = get_optimizer("mipro", num_threads=2)
    assert partial.settings == mipro_method.MiproSettings(num_threads=2)


@dataclasses.dataclass(frozen=True)
class Inner:
    depth: int = 1
    limits: SliceLimits = dataclasses.field(default_factory=SliceLimits)


@dataclasses.dataclass(frozen=True)
class Outer:
    size: int = 2
    inner: Inner = dataclasses.field(default_factory=Inner)


def test_known_keys_list_nested_fields_with_dots():
    limits = [f"inner.limits.{f.name}" for f in dataclasses.fields(SliceLimits)]
    assert known_keys(Outer) == ["size", "inner.depth", *limits]
    assert "inner.limits.clip_chars" in limits


@pytest.mark.parametrize(("overrides", "message"), [
    ({"minibach": 4}, "unknown setting 'minibach' of method 'gepa'; known: minibatch, "
                      "max_full_evals"),
    ({"reflection.nope": 1}, "unknown setting 'reflection.nope'"),
    ({"minibatch.x": 1}, "unknown setting 'minibatch.x'"),
    ({"minibatch": "three"}, "setting 'minibatch' of method 'gepa' must be an integer, got "
                             "'three'"),
    ({"minibatch": 2.5}, "must be an integer"),
    ({"use_merge": 1}, "setting 'use_merge' of method 'gepa' must be true or false"),
    ({"max_full_evals": True}, "must be an integer"),
    ({"reflection": 3}, "setting 'reflection' of method 'gepa' is a group"),
    ({"minibatch": 0}, "minibatch must be an integer >= 1"),  # the dataclass's own check
])
def test_a_bad_setting_names_the_key(overrides, message):
    with pytest.raises(SettingsError) as caught:
        resolve_settings("gepa", overrides)
    assert message in str(caught.value)


def test_a_method_without_settings_refuses_any():
    with pytest.raises(SettingsError, match="method 'identity' takes no settings; got x"):
        get_optimizer("identity", x=1)


def test_types_beyond_the_methods_own():
    @dataclasses.dataclass(frozen=True)
    class Knobs:
        rate: float = 0.5
        mode: str = "a"
        pair: tuple[int, int] = (1, 2)
        cap: int | None = None

    assert resolve(Knobs, {"rate": 1, "pair": [3, 4], "cap": None}, method="m") == {
        "rate": 1.0, "mode": "a", "pair": [3, 4], "cap": None}
    assert build(Knobs, {"pair": [5, 6]}).pair == (5, 6)
    for overrides in ({"pair": [1]}, {"cap": "x"}, {"mode": 3}):
        with pytest.raises(SettingsError):
            resolve(Knobs, overrides, method="m")


def test_the_cli_exits_2_naming_an_unknown_setting(tmp_path):
    out = tmp_path / "job"
    result = CliRunner().invoke(_entry_app, ["--method", "gepa", "--topology", "single",
                                             "--out", str(out), "--data", "sample",
                                             "--set", "minibatch=4", "--set", "nope=1"])
    assert result.exit_code == 2
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["status"] == "error"
    assert "unknown setting 'nope' of method 'gepa'; known: minibatch" in line["error"]
    assert not out.exists()


@pytest.mark.parametrize(("method", "assignment", "named"), [
    ("gepa", "reflection.limits.clip_chars=-1", "clip_chars"),
    ("gepa", "reflection.feedback_chars=0", "feedback_chars"),
    ("gepa", "reflection.records_per_reflection=0", "records_per_reflection"),
    ("gepa", "reflection.limits.max_messages=-3", "max_messages"),
    ("gepa", "max_merge_invocations=-5", "max_merge_invocations"),
    ("mipro", "max_labeled_demos=4", "max_labeled_demos"),
])
def test_a_setting_out_of_its_range_is_refused_naming_it(method, assignment, named):
    with pytest.raises(SettingsError, match=named):
        resolve_settings(method, parse_assignments([assignment]))
