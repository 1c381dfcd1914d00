"""conf.model_registry_dict_from_env: which providers and models the environment configures
(docs/architecture.md "Settings"), each result checked by the real ModelRegistry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jxai_app import conf
from jxai_app.tools.registry import builtin_tool_names, get_tool_registry
from jxai_app.conf import model_registry_dict_from_env, uses_local_model
from jxai_app.core.errors import ConfigurationError
from jxai_app.core.providers import ModelRegistry
from jxai_app.core.tools.builtin import ARITHMETIC_PATTERN


def test_nothing_set_gives_the_local_model_and_its_calculator_and_notes_aliases() -> None:
    data = model_registry_dict_from_env({})
    registry = ModelRegistry.from_dict(data)
    assert registry.aliases() == ["gemma-3-270m", "gemma-3-270m-calculator", "gemma-3-270m-notes"]
    assert data["models"]["gemma-3-270m-notes"]["tool_choice"] == {"type": "function",
                                                                   "function": {"name": "save_note"}}
    assert registry.default_alias == "gemma-3-270m"
    assert data["providers"]["local"]["base_url"] == "http://127.0.0.1:8081/v1"
    assert uses_local_model({})
    plain, calculator, _notes = (registry.get(alias) for alias in registry.aliases())
    assert plain.strip_leading_whitespace and calculator.strip_leading_whitespace
    assert (plain.tool_choice, plain.tool_choice_when) == (None, None)
    assert calculator.tool_choice == {"type": "function", "function": {"name": "calculate"}}
    assert calculator.tool_choice_when == ARITHMETIC_PATTERN
    told = registry.provider("local").unreachable_message or ""
    assert "http://127.0.0.1:8081/v1 is not answering" in told and "make run" in told


def test_the_local_model_name_chooses_the_local_aliases_and_an_unknown_one_is_refused() -> None:
    registry = ModelRegistry.from_dict(model_registry_dict_from_env({"JXAI_LOCAL_MODEL_NAME": "qwen2.5-coder-0.5b"}))
    assert registry.aliases() == ["qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-calculator", "qwen2.5-coder-0.5b-notes"]
    assert registry.get("qwen2.5-coder-0.5b").label == "Qwen2.5 Coder 0.5B (local)"
    assert registry.get("qwen2.5-coder-0.5b").model_id == "qwen2.5-coder-0.5b"  # the server's --model_alias
    with pytest.raises(ConfigurationError, match="gemma-3-270m, qwen2.5-coder-0.5b"):
        model_registry_dict_from_env({"JXAI_LOCAL_MODEL_NAME": "llama-70b"})


def test_openai_variables_configure_one_default_model_and_skip_the_local_one() -> None:
    env = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
           "JXAI_MODEL": "llama3.1", "JXAI_CONTEXT_WINDOW": "8192"}
    registry = ModelRegistry.from_dict(model_registry_dict_from_env(env))
    assert registry.aliases() == ["llama3.1"]
    model = registry.get("llama3.1")
    assert (model.model_id, model.context_window) == ("llama3.1", 8192)
    assert registry.provider(model.provider).base_url == "http://127.0.0.1:11434/v1"
    assert registry.provider(model.provider).api_key_env == "OPENAI_API_KEY"
    assert not uses_local_model(env)


def test_both_keys_give_both_providers_openai_first_as_default() -> None:
    data = model_registry_dict_from_env({"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "a"})
    registry = ModelRegistry.from_dict(data)
    assert registry.aliases() == ["gpt-4o-mini", "claude-sonnet-4-5"]
    assert registry.default_alias == "gpt-4o-mini"
    assert data["providers"]["anthropic"] == {"kind": "anthropic", "base_url": "https://api.anthropic.com/v1",
                                              "api_key_env": "ANTHROPIC_API_KEY"}
    assert registry.get("claude-sonnet-4-5").context_window == 200000


def test_models_json_wins_and_a_file_is_read(tmp_path: Path) -> None:
    doc = {"providers": {"p": {"preset": "ollama"}},
           "models": {"m": {"provider": "p", "model_id": "llama3.1"}}, "roles": {"default": "m"}}
    assert model_registry_dict_from_env({"JXAI_MODELS_JSON": json.dumps(doc), "OPENAI_API_KEY": "k"}) == doc
    path = tmp_path / "models.json"
    path.write_text(json.dumps(doc))
    assert model_registry_dict_from_env({"JXAI_MODELS_FILE": str(path)}) == doc


@pytest.mark.parametrize("env", [{"JXAI_MODELS_JSON": "{not json"}, {"JXAI_MODELS_FILE": "/nonexistent/models.json"}])
def test_unreadable_registry_sources_are_clear_configuration_errors(env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="JXAI_MODELS_"):
        model_registry_dict_from_env(env)


def test_the_built_in_tools_admin_names_are_the_registry_s_built_ins() -> None:
    """Admin's "built-in" source and the registry come from one list (save_note included)."""
    conf.reset_caches()
    assert builtin_tool_names() == {"current_datetime", "calculate", "search_conversations", "save_note"}
    assert builtin_tool_names() <= {d.name for d in get_tool_registry().list()}
