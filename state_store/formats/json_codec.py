"""JSON text of keys, namespaces and state values as stored in state files (format version 1).

Keys and namespaces: type-tagged JSON (exact round trip)
-------------------------------------------------------
Plain JSON for what JSON represents exactly, a one-member object tag for the rest. JSON objects
never appear otherwise (dicts are not valid keys), so a tag cannot be confused with data::

    None -> null      True -> true       7 -> 7        "a" -> "a"      1.5 -> 1.5   1.0 -> 1.0
    nan/inf/-inf -> {"float":"nan"} / {"float":"inf"} / {"float":"-inf"}
    b"\\x00\\xff" -> {"bytes":"AP8="}     (standard base64)
    (1, "a") -> {"tuple":[1,"a"]}         () -> {"tuple":[]}

Floats are written with ``repr`` (always a '.' or an exponent), so ``1.0`` stays a float and ``1``
an int; ``True``, ``1`` and ``1.0`` keep their types in the file even though they are one key in
memory. Subclasses are written as their base type (an ``IntEnum`` comes back as ``int``).

Values: plain JSON (user state values MUST be JSON types)
---------------------------------------------------------
``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` and ``dict`` with ``str`` keys, nested
freely. Traps: a ``tuple`` is written as a list and comes back as a ``list``; ``nan``/``inf`` are
written as ``NaN``/``Infinity`` (Python's JSON extension: pandas and Spark read the string column
fine, strict JSON parsers such as DuckDB's ``json`` functions refuse those rows). Anything else --
``set``, ``bytes``, ``datetime``, ``Decimal``, a dict with int keys (JSON would silently turn them
into strings) -- raises :class:`StateValueError` naming the state, the key and the offending type.

All JSON text is canonical: sorted object keys, no whitespace, UTF-8 (non-ASCII kept as is).
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

_TAGS = ("tuple", "bytes", "float")
_VALUE_HELP = (
    "user state values must be JSON types: None, bool, int, float, str, list, or dict with str keys "
    "(tuples are stored as lists); convert the value before storing it"
)


class StateValueError(TypeError):
    """A state value (or key) that cannot be written to a state file."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=True)


def key_to_jsonable(key: Any) -> Any:
    """The tagged JSON structure of a key or namespace (see module docstring)."""
    if key is None or isinstance(key, (int, str)):  # json writes subclasses as their base type
        return key
    if isinstance(key, float):
        if math.isfinite(key):
            return key
        return {"float": "nan" if math.isnan(key) else ("inf" if key > 0 else "-inf")}
    if isinstance(key, bytes):
        return {"bytes": base64.b64encode(key).decode("ascii")}
    if isinstance(key, tuple):
        return {"tuple": [key_to_jsonable(item) for item in key]}
    raise StateValueError(
        f"unsupported key type {type(key).__name__}: keys must be None, bool, int, float, str, bytes "
        "or a tuple of these"
    )


def key_to_json(key: Any) -> str:
    return _dumps(key_to_jsonable(key))


def key_from_jsonable(obj: Any) -> Any:
    """Inverse of :func:`key_to_jsonable`; raises ValueError on anything it would not produce."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, dict) and len(obj) == 1:
        ((tag, inner),) = obj.items()
        if tag == "tuple" and isinstance(inner, list):
            return tuple(key_from_jsonable(item) for item in inner)
        if tag == "bytes" and isinstance(inner, str):
            return base64.b64decode(inner.encode("ascii"), validate=True)
        if tag == "float" and inner in ("nan", "inf", "-inf"):
            return float(inner)
    raise ValueError(f"not a tagged key: {_dumps(obj)[:80]} (expected a scalar or one of {_TAGS})")


def key_from_json(text: str) -> Any:
    return key_from_jsonable(json.loads(text))


def _check_value(value: Any, path: str) -> str | None:
    """Where and what the first non-JSON part of ``value`` is, or None if it is all JSON."""
    if value is None or isinstance(value, (str, int, float)):  # bool is an int
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _check_value(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"{path} has a dict key {k!r} of type {type(k).__name__} (JSON keys are strings)"
            found = _check_value(item, f"{path}[{k!r}]")
            if found:
                return found
        return None
    return f"{path} has type {type(value).__name__}"


def value_to_json(value: Any, *, state: str, key: Any) -> str:
    """Canonical JSON of a state value; :class:`StateValueError` names state, key and type if not JSON."""
    if type(value) in (str, int, float, bool, type(None)):
        return _dumps(value)
    problem = _check_value(value, "value")
    if problem:
        raise StateValueError(f"state {state!r} for key {key!r}: {problem}; {_VALUE_HELP}")
    return _dumps(value)


def value_from_json(text: str) -> Any:
    return json.loads(text)
