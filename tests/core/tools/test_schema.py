"""JSON Schema generation from type hints and docstrings (jxai_app.core.tools.schema; docs/agent.md "Definitions")."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, Optional

import pytest
from jsonschema import Draft202012Validator

from jxai_app.core.errors import ToolError
from jxai_app.core.tools import ToolContext, tool
from jxai_app.core.tools.schema import function_schema, openai_strict_schema, parse_google_docstring, schema_for_type


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (Any, {}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array"}),
        (tuple[str, ...], {"type": "array", "items": {"type": "string"}}),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (dict, {"type": "object"}),
        (Literal["a", "b"], {"enum": ["a", "b"], "type": "string"}),
        (Literal[1, "x"], {"enum": [1, "x"]}),
        (Colour, {"enum": ["red", "blue"], "type": "string"}),
        (Optional[int], {"type": ["integer", "null"]}),
        (int | None, {"type": ["integer", "null"]}),
        (Literal["a"] | None, {"enum": ["a", None], "type": ["string", "null"]}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (list[int] | None, {"type": ["array", "null"], "items": {"type": "integer"}}),
        (Annotated[int, "How many."], {"type": "integer", "description": "How many."}),
        (Annotated[int, "n", {"minimum": 1}], {"type": "integer", "minimum": 1, "description": "n"}),
    ],
)
def test_each_type_hint_form(hint: Any, expected: dict[str, Any]) -> None:
    schema = schema_for_type(hint)
    assert schema == expected
    Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("hint", [bytes, set[bytes], dict[int, str], object.__class__])
def test_unsupported_hints_are_refused_with_a_clear_error(hint: Any) -> None:
    with pytest.raises(ToolError, match="JSON"):
        schema_for_type(hint, "parameter 'x' of f")


def test_google_docstring_gives_description_and_argument_texts() -> None:
    doc = """Find things.

    Longer explanation
    over two lines.

    Args:
        query (str): the words
            to look for.
        limit: how many.

    Returns:
        things.
    """
    description, params = parse_google_docstring(doc)
    assert description == "Find things.\n\nLonger explanation\nover two lines."
    assert params == {"query": "the words to look for.", "limit": "how many."}
    assert parse_google_docstring(None) == ("", {})


def test_function_schema_defaults_optional_context_and_docstring() -> None:
    def lookup(
        city: str,
        context: ToolContext,
        units: Literal["metric", "imperial"] = "metric",
        days: Annotated[int, "Days ahead."] = 1,
        note: str | None = None,
        region: Optional[str] = None,
    ) -> dict[str, Any]:
        """Weather for a city.

        Args:
            city: the city name.
            days: ignored in favour of Annotated.
        """
        return {}

    info = function_schema(lookup)
    assert info.description == "Weather for a city."
    assert info.context_param == "context"
    props = info.parameters["properties"]
    assert list(props) == ["city", "units", "days", "note", "region"]
    assert props["city"] == {"type": "string", "description": "the city name."}
    assert props["units"] == {"enum": ["metric", "imperial"], "type": "string", "default": "metric"}
    assert props["days"] == {"type": "integer", "description": "Days ahead.", "default": 1}
    assert props["note"] == {"type": ["string", "null"], "default": None}
    assert info.parameters["required"] == ["city"]
    assert info.parameters["additionalProperties"] is False
    Draft202012Validator.check_schema(info.parameters)


def test_optional_without_default_is_not_required_and_receives_none() -> None:
    seen: dict[str, Any] = {}

    @tool
    def pick(tag: str | None, size: int) -> str:
        """Pick."""
        seen.update(tag=tag, size=size)
        return "ok"

    assert pick.parameters["required"] == ["size"]
    assert pick.execute({"size": 2}, ToolContext()) == "ok"
    assert seen == {"tag": None, "size": 2}


def test_context_found_by_annotation_under_another_name() -> None:
    @tool
    def whoami(ctx: ToolContext) -> Any:
        """Who is asking."""
        return ctx.user

    assert whoami.parameters["properties"] == {}
    assert whoami.execute({}, ToolContext(user="ann")) == "ann"


@pytest.mark.parametrize("source", ["args", "kwargs", "unannotated"])
def test_signatures_without_a_schema_are_refused(source: str) -> None:
    def with_args(*items: int) -> None: ...
    def with_kwargs(**items: int) -> None: ...
    def unannotated(x) -> None: ...  # type: ignore[no-untyped-def]

    fn = {"args": with_args, "kwargs": with_kwargs, "unannotated": unannotated}[source]
    with pytest.raises(ToolError):
        tool(fn)


def test_openai_strict_schema_closes_objects_and_requires_everything() -> None:
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": "string"},
            "n": {"type": "integer", "default": 5},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        },
        "required": ["q"],
    }
    strict = openai_strict_schema(schema)
    assert strict["required"] == ["q", "n", "tags"]
    assert strict["additionalProperties"] is False
    assert strict["properties"]["q"] == {"type": "string"}
    assert strict["properties"]["n"] == {"type": ["integer", "null"]}
    item = strict["properties"]["tags"]["items"]
    assert item["additionalProperties"] is False and item["required"] == ["k"]
    assert item["properties"]["k"] == {"type": ["string", "null"]}
    assert schema["properties"]["n"] == {"type": "integer", "default": 5}  # input untouched
    Draft202012Validator.check_schema(strict)
