"""Argument preparation and validation (docs/agent.md "Validation": JSON Schema, coercion, null as missing)."""

from __future__ import annotations

from typing import Any

import pytest

from jxai_app.core.tools import ToolDefinition, ToolRegistry
from jxai_app.core.tools.validation import prepare_arguments, validation_errors

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number"},
        "label": {"type": "string"},
        "mode": {"enum": ["fast", "slow"], "type": "string"},
        "maybe": {"type": ["integer", "null"]},
        "flags": {"type": "array", "items": {"type": "number"}},
        "inner": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
    "required": ["count"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"count": "42"}, {"count": 42}),
        ({"count": " 7 "}, {"count": 7}),
        ({"count": "3.0"}, {"count": 3}),
        ({"count": 4.0}, {"count": 4}),
        ({"count": 1, "ratio": "2.5"}, {"count": 1, "ratio": 2.5}),
        ({"count": 1, "ratio": "-1e3"}, {"count": 1, "ratio": -1000.0}),
        ({"count": 1, "ratio": "12"}, {"count": 1, "ratio": 12}),
        ({"count": 1, "label": "42"}, {"count": 1, "label": "42"}),
        ({"count": 1, "flags": ["1", 2, "3.5"]}, {"count": 1, "flags": [1, 2, 3.5]}),
        ({"count": 1, "inner": {"n": "9"}}, {"count": 1, "inner": {"n": 9}}),
        ({"count": "2.5"}, {"count": "2.5"}),
        ({"count": "1e999"}, {"count": "1e999"}),
        ({"count": "abc"}, {"count": "abc"}),
    ],
)
def test_numeric_strings_are_coerced_for_numeric_properties(given: dict[str, Any], expected: dict[str, Any]) -> None:
    assert prepare_arguments(SCHEMA, given) == expected


def test_null_for_a_non_nullable_key_is_absent_but_kept_where_null_is_allowed() -> None:
    assert prepare_arguments(SCHEMA, {"count": 1, "label": None, "maybe": None}) == {"count": 1, "maybe": None}
    assert validation_errors(SCHEMA, prepare_arguments(SCHEMA, {"count": None})) == ["Missing required argument 'count'."]


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        ({}, "Missing required argument 'count'."),
        ({"count": "abc"}, "Argument 'count' must be an integer, got the non-numeric string \"abc\"."),
        ({"count": 2.5}, "Argument 'count' must be an integer, got a number."),
        ({"count": -1}, "Argument 'count': -1 is less than the minimum of 0."),
        ({"count": 1, "label": 5}, "Argument 'label' must be a string, got a number."),
        ({"count": 1, "mode": "medium"}, 'Argument \'mode\' must be one of "fast", "slow"; got "medium".'),
        ({"count": 1, "owner": "bob"}, "Unknown argument 'owner'."),
        ({"count": 1, "inner": {"n": "x"}}, "Argument 'inner.n' must be an integer, got the non-numeric string \"x\"."),
        ({"count": 1, "flags": [1, "no"]}, "Argument 'flags[1]' must be a number, got the non-numeric string \"no\"."),
    ],
)
def test_errors_are_sentences_naming_the_argument(args: dict[str, Any], sentence: str) -> None:
    assert validation_errors(SCHEMA, prepare_arguments(SCHEMA, args)) == [sentence]


def test_several_errors_each_get_a_sentence() -> None:
    errors = validation_errors(SCHEMA, {"label": 1, "extra": True, "other": 2})
    assert "Missing required argument 'count'." in errors
    assert "Unknown argument 'extra'." in errors and "Unknown argument 'other'." in errors
    assert "Argument 'label' must be a string, got a number." in errors


def test_registry_validate_uses_the_same_rules_and_respects_strict_false() -> None:
    checked = ToolDefinition("checked", "", SCHEMA, lambda a, c: a)
    loose = ToolDefinition("loose", "", SCHEMA, lambda a, c: a, strict=False)
    registry = ToolRegistry([checked, loose])
    assert registry.validate("checked", {"count": "5"}) == []
    assert registry.validate("checked", {"count": None}) == ["Missing required argument 'count'."]
    assert registry.validate("checked", ["not", "an", "object"]) == ["The arguments must be a JSON object."]
    assert registry.validate("loose", {}) == []
    assert registry.validate("nope", {}) == ['Unknown tool: "nope"']
