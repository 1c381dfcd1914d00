"""JSON Schema (Draft 2020-12) from a function's type hints and Google-style docstring (docs/agent.md "Definitions").

The rules, in the spirit of pydantic-ai's ``_function_schema.py``:

* ``str`` → ``string``, ``int`` → ``integer``, ``float`` → ``number``, ``bool`` → ``boolean``,
  ``list[X]`` / ``tuple[X, ...]`` / ``set[X]`` → ``array`` of ``X``, ``dict[str, X]`` → ``object``
  whose values are ``X``, ``Any`` → ``{}`` (anything).
* ``Literal["a", "b"]`` and ``enum.Enum`` subclasses → ``enum`` (with ``type`` when uniform).
* ``Optional[X]`` / ``X | None`` → nullable ``X``; other unions → ``anyOf``.
* ``Annotated[X, "text"]`` → ``X`` with ``description`` "text" (a ``str`` in the metadata);
  otherwise the docstring's ``Args:`` entry gives the description. A mapping in the
  metadata adds JSON Schema keywords (``Annotated[int, {"minimum": 1}]``).
* A parameter with a default is not required and carries ``default`` when JSON-serialisable;
  an ``Optional`` parameter without a default is not required either (it receives ``None``).
* Every object schema generated here has ``additionalProperties: false``.

``openai_strict_schema`` rewrites a schema for OpenAI's ``strict: true`` function calling
(every object closed, every property required, optional properties made nullable, ``default``
dropped), used only in the wire listing of tools with ``llm_strict`` (a schema sent with ``strict: true``
that is not strict-compliant is rejected by the provider; docs/agent.md "Listing for the model").
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jxai_app.core.errors import ToolError
from jxai_app.core.tools.context import ToolContext

__all__ = [
    "FunctionSchema",
    "function_schema",
    "openai_strict_schema",
    "parse_google_docstring",
    "schema_for_type",
]

_NONE_TYPE = type(None)
_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Returns|Yields|Raises|Example|Examples|Note|Notes|Attributes|See Also|Warning|Warnings):\s*$")
_ARG_RE = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(?P<desc>.*)$")


@dataclass(frozen=True)
class FunctionSchema:
    """What ``function_schema`` learned about a function.

    Attributes:
        description: the docstring's text before its first section (``""`` when none).
        parameters: the JSON Schema of the arguments (``{"type": "object", …}``).
        context_param: the name of the parameter receiving the ``ToolContext``, or ``None``.
        nullable_defaults: parameters that receive ``None`` when the model omits them
            (``Optional`` parameters without a default).
    """

    description: str
    parameters: dict[str, Any]
    context_param: str | None
    nullable_defaults: tuple[str, ...]


def parse_google_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and ``Args:`` descriptions.

    Args:
        doc: the raw docstring (``None`` allowed).

    Returns:
        ``(description, {parameter name: description})``. The description is the text before
        the first section header, paragraphs kept; continuation lines of an argument are
        joined with single spaces.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for raw in lines:
        stripped = raw.strip()
        header = _SECTION_RE.match(stripped)
        if header and (len(raw) - len(raw.lstrip())) == 0:
            section, current, arg_indent = header.group(1), None, None
            continue
        if section is None:
            description.append(raw)
            continue
        if section not in ("Args", "Arguments", "Parameters") or not stripped:
            continue
        indent = len(raw) - len(raw.lstrip())
        match = _ARG_RE.match(stripped)
        if match and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = match.group("name")
            params[current] = match.group("desc").strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return "\n".join(description).strip(), params


def _enum_schema(values: Sequence[Any], where: str) -> dict[str, Any]:
    kinds = {_json_type_of(v, where) for v in values}
    schema: dict[str, Any] = {"enum": list(values)}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema


def _json_type_of(value: Any, where: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise ToolError(f"{where}: enum value {value!r} is not a JSON scalar")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """Return ``schema`` also accepting ``null``."""
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str) and "anyOf" not in out:
        out["type"] = [kind, "null"] if kind != "null" else "null"
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    if isinstance(kind, list):
        if "null" not in kind:
            out["type"] = [*kind, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    if "anyOf" in out:
        if not any(s.get("type") == "null" for s in out["anyOf"]):
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        return out
    if not out:  # Any already accepts null
        return out
    return {"anyOf": [out, {"type": "null"}]}


def schema_for_type(hint: Any, where: str = "type") -> dict[str, Any]:
    """Build the JSON Schema of one type hint.

    Args:
        hint: a resolved type hint (see the module docstring for the supported forms).
        where: a label for error messages (e.g. ``"parameter 'x' of f"``).

    Returns:
        A JSON Schema dict (Draft 2020-12).

    Raises:
        ToolError: the hint has no JSON Schema form here (e.g. a class, ``bytes``).
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = dict(schema_for_type(args[0], where))
        for meta in args[1:]:
            if isinstance(meta, Mapping):
                schema.update(meta)
        texts = [m for m in args[1:] if isinstance(m, str)]
        if texts:
            schema["description"] = " ".join(t.strip() for t in texts)
        return schema
    if hint is Any or hint is object:
        return {}
    if hint is _NONE_TYPE or hint is None:
        return {"type": "null"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if origin is typing.Literal:
        return _enum_schema(list(args), where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([m.value for m in hint], where)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not _NONE_TYPE]
        inner = (
            schema_for_type(members[0], where)
            if len(members) == 1
            else {"anyOf": [schema_for_type(m, where) for m in members]}
        )
        return _nullable(inner) if len(members) < len(args) else inner
    if hint in (list, tuple, set, frozenset) or origin in (list, set, frozenset, Sequence):
        return {"type": "array", "items": schema_for_type(args[0], where)} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_for_type(args[0], where)}
        return {
            "type": "array",
            "prefixItems": [schema_for_type(a, where) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if hint is dict or origin in (dict, Mapping):
        if args and args[0] is not str:
            raise ToolError(f"{where}: dict keys must be str for JSON objects")
        obj: dict[str, Any] = {"type": "object"}
        if len(args) == 2:
            obj["additionalProperties"] = schema_for_type(args[1], where)
        return obj
    raise ToolError(f"{where}: type {hint!r} has no JSON Schema form (use str, int, float, bool, list, dict, Literal, Optional)")


def _is_context_param(name: str, hint: Any) -> bool:
    base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    if isinstance(base, type) and issubclass(base, ToolContext):
        return True
    if typing.get_origin(base) in (typing.Union, types.UnionType):
        return any(isinstance(a, type) and issubclass(a, ToolContext) for a in typing.get_args(base))
    return name == "context"


def _accepts_null(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if not schema:
        return True
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_accepts_null(s) for s in schema.get("anyOf", ()))


def function_schema(fn: Callable[..., Any]) -> FunctionSchema:
    """Build the argument schema of ``fn`` from its signature, type hints and docstring.

    Args:
        fn: a plain or ``async`` function whose parameters are all annotated, except the
            one receiving the ``ToolContext`` (named ``context`` or annotated
            ``ToolContext``), which is left out of the schema.

    Returns:
        A ``FunctionSchema``.

    Raises:
        ToolError: a parameter is unannotated, variadic, positional-only, or of an
            unsupported type.
    """
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        hints = typing.get_type_hints(fn, localns={"ToolContext": ToolContext}, include_extras=True)
    except Exception as exc:  # NameError for unresolvable forward references
        raise ToolError(f"cannot resolve the type hints of {name}: {exc}") from exc
    description, arg_docs = parse_google_docstring(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    nullable_defaults: list[str] = []
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        hint = hints.get(param.name, inspect.Parameter.empty)
        if _is_context_param(param.name, hint):
            context_param = param.name
            continue
        where = f"parameter {param.name!r} of {name}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolError(f"{where}: tools take named arguments only (no *args, **kwargs or positional-only)")
        if hint is inspect.Parameter.empty:
            raise ToolError(f"{where} needs a type annotation")
        schema = schema_for_type(hint, where)
        if "description" not in schema and param.name in arg_docs and arg_docs[param.name]:
            schema["description"] = arg_docs[param.name]
        if param.default is not inspect.Parameter.empty:
            try:
                json.dumps(param.default, allow_nan=False)
            except (TypeError, ValueError):
                pass
            else:
                schema["default"] = param.default.value if isinstance(param.default, enum.Enum) else param.default
        elif _accepts_null(schema) and schema:
            nullable_defaults.append(param.name)
        else:
            required.append(param.name)
        properties[param.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        parameters["required"] = required
    return FunctionSchema(description, parameters, context_param, tuple(nullable_defaults))


def openai_strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Rewrite a schema into the subset OpenAI accepts with ``strict: true``.

    Every object gets ``additionalProperties: false`` and lists all its properties as
    required; properties that were optional become nullable (the registry treats ``null``
    for an optional argument as "absent", so the default still applies); ``default`` is
    dropped. The input is not modified.

    Args:
        schema: a JSON Schema.

    Returns:
        The rewritten copy.
    """
    out: dict[str, Any] = {k: v for k, v in schema.items() if k != "default"}
    if "properties" in out:
        was_required = set(out.get("required", ()))
        props: dict[str, Any] = {}
        for key, sub in out["properties"].items():
            strict_sub = openai_strict_schema(sub)
            props[key] = strict_sub if key in was_required else _nullable(strict_sub)
        out["properties"] = props
        out["required"] = list(props)
        out["additionalProperties"] = False
    elif out.get("type") == "object" and not isinstance(out.get("additionalProperties"), Mapping):
        out["additionalProperties"] = False
        out.setdefault("properties", {})
        out.setdefault("required", [])
    for key in ("items",):
        if isinstance(out.get(key), Mapping):
            out[key] = openai_strict_schema(out[key])
    for key in ("anyOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [openai_strict_schema(s) for s in out[key]]
    if isinstance(out.get("$defs"), Mapping):
        out["$defs"] = {k: openai_strict_schema(v) for k, v in out["$defs"].items()}
    return out
