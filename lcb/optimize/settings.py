"""Method settings: each method's settings dataclass, `--set key=value` overrides, the full record.

Contract:
- A method module exposes `SETTINGS = <its frozen settings dataclass>`, every field defaulted
  (the defaults are the method's reference settings); a module without `SETTINGS` takes none.
  `settings_class(factory)` finds it from the factory registered in `OPTIMIZERS`.
- `parse_assignments(["minibatch=4", "reflection.limits.clip_chars=900", "note=abc"])` gives
  `{"minibatch": 4, "reflection.limits.clip_chars": 900, "note": "abc"}`: a value is parsed as
  JSON, else kept as the string. A missing `=` or an empty key raises `SettingsError`.
  `assignments(nested)` writes nested settings back as such pairs (values as JSON).
- `resolve(cls, overrides, method=...)` returns the full settings (defaults included) as a
  nested JSON dict: what `job.json` records as `method_settings`. Keys are field names; a field
  of a nested dataclass is addressed with dots (`reflection.records_per_reflection`), or the
  nested field is given whole as a JSON object. Values are checked against the annotations
  (bool, int, float (an int is accepted), str, None, Literal, unions, tuples/lists, nested
  dataclasses), then the dataclass's own checks run. An unknown key or a bad value raises
  `SettingsError` (a ValueError: the CLI exits 2) naming the key and listing the known keys.
- `build(cls, data)` makes the dataclass from such a dict, nested dataclasses from nested dicts.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


class SettingsError(ValueError):
    """A method setting that does not exist or has a bad value (the message names it)."""


def settings_class(factory: Callable[..., object]) -> type | None:
    """The `SETTINGS` dataclass of the module that defines `factory` (None: no settings)."""
    module = inspect.getmodule(factory)
    found = getattr(module, "SETTINGS", None)
    return found if isinstance(found, type) and dataclasses.is_dataclass(found) else None


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """`key=value` strings to `{key: value}`; a value is JSON when it parses, else a string."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingsError(f"--set {item!r}: expected key=value, e.g. minibatch=4")
        try:
            parsed[key] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key] = raw
    return parsed


def assignments(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The inverse of `parse_assignments` for nested settings: `{"a": {"b": 1}}` ->
    `["a.b=1"]`, every value as JSON (so a string that looks like a number stays a string)."""
    pairs: list[str] = []
    for name, value in settings.items():
        if isinstance(value, Mapping):
            pairs += assignments(value, f"{prefix}{name}.")
        else:
            pairs.append(f"{prefix}{name}={json.dumps(value)}")
    return pairs


def known_keys(cls: type) -> list[str]:
    """Every settable leaf key of `cls`, nested fields with dots, in field order."""
    keys: list[str] = []
    for name, hint in _hints(cls).items():
        if _is_dataclass_type(hint):
            keys += [f"{name}.{sub}" for sub in known_keys(hint)]
        else:
            keys.append(name)
    return keys


def resolve(cls: type | None, overrides: Mapping[str, Any], *, method: str) -> dict[str, Any]:
    """The full settings of `cls` with `overrides` applied, as a nested JSON dict."""
    if cls is None:
        if overrides:
            raise SettingsError(f"method {method!r} takes no settings; got "
                                f"{', '.join(sorted(overrides))}")
        return {}
    data = as_json(cls())
    for key, value in overrides.items():
        _assign(cls, data, key, value, method=method)
    try:
        return as_json(build(cls, data))
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"invalid settings for method {method!r}: {exc}") from None


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """`cls(**data)` with nested dataclasses made from nested dicts and lists made tuples."""
    hints = _hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise SettingsError(f"unknown setting(s) {unknown} of {cls.__name__}; known: "
                            f"{', '.join(known_keys(cls))}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        hint = hints[name]
        if _is_dataclass_type(hint) and isinstance(value, Mapping):
            value = build(hint, value)
        elif get_origin(hint) is tuple and isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return cls(**values)


def as_json(settings: Any) -> dict[str, Any]:
    """A settings dataclass as plain JSON data (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(settings)))


def _assign(cls: type, data: dict[str, Any], key: str, value: Any, *, method: str) -> None:
    *path, leaf = key.split(".")
    owner, level = cls, data
    for part in path:
        hint = _field_hint(owner, part, key, root=cls, method=method)
        if not _is_dataclass_type(hint):
            raise _unknown(key, cls, method)
        owner, level = hint, level[part]
    hint = _field_hint(owner, leaf, key, root=cls, method=method)
    if _is_dataclass_type(hint):
        if not isinstance(value, Mapping):
            raise SettingsError(f"setting {key!r} of method {method!r} is a group: give a JSON "
                                f"object or set its fields ({', '.join(known_keys(hint))})")
        for sub, sub_value in value.items():
            _assign(cls, data, f"{key}.{sub}", sub_value, method=method)
        return
    if not _matches(value, hint):
        raise SettingsError(f"setting {key!r} of method {method!r} must be {_describe(hint)}, "
                            f"got {value!r}")
    level[leaf] = float(value) if hint is float else value


def _field_hint(owner: type, name: str, key: str, *, root: type, method: str) -> Any:
    hints = _hints(owner)
    if name not in hints:
        raise _unknown(key, root, method)
    return hints[name]


def _unknown(key: str, cls: type, method: str) -> SettingsError:
    return SettingsError(f"unknown setting {key!r} of method {method!r}; known: "
                         f"{', '.join(known_keys(cls))}")


def _hints(cls: type) -> dict[str, Any]:
    hints = get_type_hints(cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(cls) if field.init}


def _is_dataclass_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _matches(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in get_args(hint))
    if origin is Literal:
        return any(value == arg and type(value) is type(arg) for arg in get_args(hint))
    if origin in (tuple, list):
        return isinstance(value, list | tuple) and _items_match(value, get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # an annotation this checker does not know: the dataclass's own checks decide


def _items_match(value: list | tuple, args: tuple[Any, ...]) -> bool:
    if not args:
        return True
    if len(args) == 2 and args[1] is Ellipsis:
        return all(_matches(item, args[0]) for item in value)
    return len(value) == len(args) and all(map(_matches, value, args))


def _describe(hint: Any) -> str:
    if get_origin(hint) is Literal:
        return "one of " + ", ".join(repr(arg) for arg in get_args(hint))
    if get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in get_args(hint))
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number",
             str: "a string"}
    if hint in names:
        return names[hint]
    if get_origin(hint) in (tuple, list):
        return "a JSON list"
    return getattr(hint, "__name__", str(hint))


def check_int_fields(settings: object, method: str, *,
                     least: Mapping[str, int] | None = None) -> None:
    """Raise ValueError, naming the method and the field, for an `int` (or a set `int | None`)
    field of the settings dataclass below its least value (`least[name]`, default 1). The
    methods' `__post_init__` share this check; other ranges they check themselves."""
    for item in dataclasses.fields(settings):  # type: ignore[arg-type]
        if item.type not in ("int", "int | None"):
            continue
        value = getattr(settings, item.name)
        if value is None and item.type != "int":
            continue
        low = (least or {}).get(item.name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            nullable = " or null" if item.type != "int" else ""
            raise ValueError(f"{method} setting {item.name} must be an integer >= {low}"
                             f"{nullable}, got {value!r}")
