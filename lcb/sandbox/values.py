"""A functional program's return value as data: what `==` distinguishes, nothing that runs code.

The program's process encodes what its function returned (`encode`); the judge decodes it
(`decode`) into plain Python values and compares them with the expected value there, so no
`__eq__`, `__hash__` or `json` of the program's ever takes part in a verdict.

Encoding (JSON text; every JSON object is a tag, so a tag cannot be forged by a plain value):
- `None`, `bool`, `str`, `float` (NaN and infinities as JSON's NaN/Infinity) and `list`: as JSON;
- `int`: a JSON number, or `{"int": "<hex>"}` beyond 2**64 (hex decodes in linear time and has
  no digit limit);
- `tuple`: `{"tuple": [...]}` (a tuple never equals a list, except at the top level, which
  LiveCodeBench turns into a list);
- `dict` (and `OrderedDict`, `defaultdict`, `Counter`): `{"dict": [[key, value], ...]}`, keys
  encoded like values (`{1: 2} != {"1": 2}`). The judge builds a dict only when every key is a
  string (the only keys an expected JSON value has; string hashing is randomized in the judge);
  any other dict decodes to `UnequalDict`, equal to nothing, so no program-chosen key is ever
  hashed there (integer keys can be made to collide, which would cost the judge quadratic time);
- numpy scalars and 0-d arrays: their `.item()` (they compare as that Python value).
Anything else (a class of the program's, a set, a generator, a numpy array, a subclass of a
built-in type) raises `NotData` naming its type: the test fails with that verdict.
"""

from __future__ import annotations

import collections
import json
from typing import Any

_ATOMS = frozenset({str, bool, float, type(None)})
_DICTS = frozenset({dict, collections.OrderedDict, collections.defaultdict, collections.Counter})
_INT_LIMIT = 1 << 64
_MAX_HEX_DIGITS = 1 << 24


class NotData(ValueError):
    """A returned value (or a part of it) that is not plain data."""


def _type_name(value: object) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", "?")
    name = getattr(kind, "__qualname__", kind.__name__)
    return name if module == "builtins" else f"{module}.{name}"


def _tagged(value: Any) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is int:
        return value if -_INT_LIMIT < value < _INT_LIMIT else {"int": hex(value)}
    if kind is list:
        return [_tagged(item) for item in value]
    if kind is tuple:
        return {"tuple": [_tagged(item) for item in value]}
    if kind in _DICTS:
        return {"dict": [[_tagged(key), _tagged(item)] for key, item in value.items()]}
    if getattr(kind, "__module__", "") == "numpy" and getattr(value, "ndim", None) == 0:
        return _tagged(value.item())
    raise NotData(f"the function returned a {_type_name(value)}, which is not plain data")


def encode(value: Any) -> str:
    """The JSON text of `value` (see module docstring); raises `NotData`."""
    try:
        return json.dumps(_tagged(value), separators=(",", ":"))
    except RecursionError:
        raise NotData("the returned value is nested too deeply") from None


def _untag(obj: dict) -> Any:
    if len(obj) == 1:
        [(tag, body)] = obj.items()
        if tag == "tuple" and type(body) is list:
            return tuple(body)
        if tag == "dict" and type(body) is list:
            return _pairs(body)
        if tag == "int" and type(body) is str and len(body) <= _MAX_HEX_DIGITS:
            return int(body, 16)
    raise NotData("the returned value's encoding is not one lcb writes")


class UnequalDict:
    """A returned dict with a key that is not a string: it equals no JSON value, so it is
    compared as unequal without hashing its keys."""

    __slots__ = ("pairs",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, pairs: list):
        self.pairs = pairs

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.pairs[:50]) + (
            ", ..." if len(self.pairs) > 50 else "") + "}"


def _pairs(body: list) -> dict | UnequalDict:
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise NotData("a dict entry is not a key-value pair")
    if all(type(key) is str for key, _ in body):
        return dict(body)
    return UnequalDict(body)


def decode(text: str | bytes) -> Any:
    """Plain values from `encode`'s text; raises `NotData` for anything else.

    A decimal integer longer than the interpreter's `sys.get_int_max_str_digits()` is refused
    by `json` itself (the judge keeps the default, 4300: `encode` writes big ints in hex), so
    no program can make the judge spend quadratic time converting digits."""
    try:
        return json.loads(text, object_hook=_untag)
    except NotData:
        raise
    except (ValueError, RecursionError, TypeError) as exc:
        raise NotData(f"the returned value could not be read ({type(exc).__name__})") from None
