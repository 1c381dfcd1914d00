"""Provider presets: configuration only — which client kind, base URL, extra headers and the
environment variable that usually holds the key. No code paths differ per preset; every
OpenAI-compatible server goes through :class:`~jxai_app.core.streaming.openai.OpenAIChatClient`.

Sources: each provider's API documentation (OpenAI, OpenRouter "API reference",
Groq "OpenAI compatibility", DeepSeek "API docs", Ollama "OpenAI compatibility",
vLLM "OpenAI-compatible server", llama.cpp ``tools/server/README.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, Mapping


@dataclass(frozen=True, slots=True)
class ProviderPreset:
    """Defaults for one provider.

    Attributes:
        kind: the client to use: ``openai`` (OpenAI-compatible), ``anthropic`` or ``proxy``.
        base_url: the API root the client appends its path to.
        extra_headers: headers the provider wants on every request.
        api_key_env: the environment variable conventionally holding the key (``None``: no key).
        notes: what to know when using it.
    """

    kind: Literal["openai", "anthropic", "proxy"]
    base_url: str
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    notes: str = ""


PROVIDER_PRESETS: Final[dict[str, ProviderPreset]] = {
    "openai": ProviderPreset(
        "openai", "https://api.openai.com/v1", api_key_env="OPENAI_API_KEY",
        notes="Reasoning models reject a custom temperature; leave it unset."),
    "anthropic": ProviderPreset(
        "anthropic", "https://api.anthropic.com/v1", api_key_env="ANTHROPIC_API_KEY",
        notes="Messages API; max_tokens is required and comes from the model settings."),
    "openrouter": ProviderPreset(
        "openai", "https://openrouter.ai/api/v1",
        extra_headers={"HTTP-Referer": "https://jxai.dev", "X-Title": "jxai"}, api_key_env="OPENROUTER_API_KEY",
        notes="Sends reasoning as delta.reasoning and ': OPENROUTER PROCESSING' keep-alive comments."),
    "groq": ProviderPreset(
        "openai", "https://api.groq.com/openai/v1", api_key_env="GROQ_API_KEY",
        notes="Also repeats usage under x_groq; only the standard usage member is read."),
    "deepseek": ProviderPreset(
        "openai", "https://api.deepseek.com/v1", api_key_env="DEEPSEEK_API_KEY",
        notes="deepseek-reasoner streams delta.reasoning_content; replay it on the next request."),
    "ollama": ProviderPreset(
        "openai", "http://127.0.0.1:11434/v1", api_key_env=None,
        notes="Local; no key needed. Tool calls usually arrive whole in one chunk."),
    "vllm": ProviderPreset(
        "openai", "http://127.0.0.1:8000/v1", api_key_env="VLLM_API_KEY",
        notes="Key only when the server was started with --api-key. Tool calls need a tool parser."),
    "llamacpp": ProviderPreset(
        "openai", "http://127.0.0.1:8080/v1", api_key_env=None,
        notes="llama.cpp's server; repeats id and name on every tool-call chunk and may send an "
              "'error:' SSE field."),
}
"""Known providers by name."""
