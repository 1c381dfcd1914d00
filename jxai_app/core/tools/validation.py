"""Argument preparation and JSON Schema validation for tool calls (docs/agent.md "Validation").

Before validation the arguments are *prepared*:

* ``null`` for a property whose schema does not accept ``null`` counts as absent: the key is
  dropped, so a required argument is reported missing and an optional one
  takes its default.
* numeric strings are coerced to numbers for ``number``/``integer`` properties, at any depth
  of ``properties``/``items``.
  ``"42"`` → ``42``, ``"2.5"`` → ``2.5``; an integral float for an ``integer`` property
  becomes an ``int``. Strings that are not numbers are left alone and fail validation with
  a sentence containing "non-numeric".

Validation is Draft 2020-12 with the ``jsonschema`` library; each error becomes one short
sentence naming the argument, meant for the model to read and correct.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

__all__ = ["prepare_arguments", "validation_errors"]

_INT_RE = re.compile(r"^[+-]?\d+$")
_NUMBER_RE = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_ARTICLE = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean (true or false)",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _types_of(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a schema names, through ``type`` and ``anyOf``/``oneOf`` members."""
    kinds: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        kinds.add(kind)
    elif isinstance(kind, list):
        kinds.update(k for k in kind if isinstance(k, str))
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key, ()) or ():
            if isinstance(sub, Mapping):
                kinds |= _types_of(sub)
    return kinds


def _accepts_null(schema: Mapping[str, Any]) -> bool:
    kinds = _types_of(schema)
    return not kinds or "null" in kinds


def _coerce(schema: Mapping[str, Any], value: Any) -> Any:
    kinds = _types_of(schema)
    if isinstance(value, str) and "string" not in kinds:
        text = value.strip()
        if len(text) <= 64 and _NUMBER_RE.match(text) and ({"number", "integer"} & kinds):
            if _INT_RE.match(text):
                return int(text)
            number = float(text)
            if not math.isfinite(number):
                return value
            if "number" in kinds:
                return number
            return int(number) if number.is_integer() else value
        return value
    if isinstance(value, float) and "integer" in kinds and "number" not in kinds and value.is_integer():
        return int(value)
    if isinstance(value, dict) and isinstance(schema.get("properties"), Mapping):
        return _prepare_object(schema, value)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [_coerce(schema["items"], item) for item in value]
    return value


def _prepare_object(schema: Mapping[str, Any], value: Mapping[str, Any]) -> dict[str, Any]:
    props: Mapping[str, Any] = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for key, item in value.items():
        sub = props.get(key)
        if not isinstance(sub, Mapping):
            out[key] = item
        elif item is None and not _accepts_null(sub):
            continue  # null means absent (docs/agent.md "Validation")
        else:
            out[key] = _coerce(sub, item)
    return out


def prepare_arguments(schema: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """Drop ``null``-as-absent keys and coerce numeric strings (see the module docstring).

    Args:
        schema: the tool's parameters schema (``{"type": "object", "properties": …}``).
        args: the decoded arguments object.

    Returns:
        A new dict; ``args`` is not modified.
    """
    return _prepare_object(schema, args)


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def _path(error: ValidationError) -> str:
    text = ""
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _sentence(error: ValidationError) -> list[str]:
    where = _path(error)
    prefix = f"{where}." if where else ""
    value: Any = error.validator_value  # the keyword's value in the schema (jsonschema types it loosely)
    if error.validator == "required":
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        return [f"Missing required argument '{prefix}{k}'." for k in value if k not in instance]
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = set((error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else ())
        instance = error.instance if isinstance(error.instance, Mapping) else {}
        return [f"Unknown argument '{prefix}{k}'." for k in instance if k not in known]
    name = f"Argument '{where}'" if where else "The arguments"
    if error.validator == "type":
        wanted = [value] if isinstance(value, str) else list(value)
        article = " or ".join(_ARTICLE.get(w, w) for w in wanted)
        if isinstance(error.instance, str) and {"number", "integer"} & set(wanted):
            return [f"{name} must be {article}, got the non-numeric string {_show(error.instance)}."]
        return [f"{name} must be {article}, got {_json_type(error.instance)}."]
    if error.validator == "enum":
        return [f"{name} must be one of {', '.join(_show(v) for v in value)}; got {_show(error.instance)}."]
    return [f"{name}: {error.message}."]


def validation_errors(schema: Mapping[str, Any], args: Any) -> list[str]:
    """Validate prepared arguments against ``schema`` (Draft 2020-12).

    Args:
        schema: a JSON Schema (checked when the tool was defined).
        args: the prepared arguments (``prepare_arguments``).

    Returns:
        Short sentences, one per problem, each naming the argument; empty when valid.
    """
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(args), key=lambda e: (list(map(str, e.absolute_path)), str(e.validator)))
    sentences: list[str] = []
    for error in errors:
        for sentence in _sentence(error):
            if sentence not in sentences:
                sentences.append(sentence)
    return sentences
