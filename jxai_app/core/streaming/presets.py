"""Provider presets: configuration only — which client kind, base URL, extra headers and the
environment variable that usually holds the key. No code paths differ per preset; every
OpenAI-compatible server goes through :class:`~jxai_app.core.streaming.openai.OpenAIChatClient`,
OpenAI's Responses API through :class:`~jxai_app.core.streaming.responses.ResponsesChatClient`.
What each provider sends that needed care is in docs/providers.md.

Sources: each provider's API documentation (OpenAI, OpenRouter "API reference",
Groq "OpenAI compatibility", DeepSeek "API docs", Ollama "OpenAI compatibility",
vLLM "OpenAI-compatible server", llama.cpp ``tools/server/README.md``, Mistral "Chat
completion", xAI "REST API reference", Alibaba Model Studio "OpenAI compatibility", Moonshot
"Kimi API quickstart", Perplexity "Chat completions", Google "Gemini OpenAI compatibility").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, Mapping


@dataclass(frozen=True, slots=True)
class ProviderPreset:
    """Defaults for one provider.

    Attributes:
        kind: the client to use: ``openai`` (OpenAI-compatible chat completions),
            ``openai-responses`` (OpenAI's Responses API), ``anthropic`` or ``proxy``.
        base_url: the API root the client appends its path to.
        extra_headers: headers the provider wants on every request.
        api_key_env: the environment variable conventionally holding the key (``None``: no key).
        notes: what to know when using it.
    """

    kind: Literal["openai", "openai-responses", "anthropic", "proxy"]
    base_url: str
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    notes: str = ""


PROVIDER_PRESETS: Final[dict[str, ProviderPreset]] = {
    "openai": ProviderPreset(
        "openai", "https://api.openai.com/v1", api_key_env="OPENAI_API_KEY",
        notes="Reasoning models reject a custom temperature; leave it unset."),
    "openai-responses": ProviderPreset(
        "openai-responses", "https://api.openai.com/v1", api_key_env="OPENAI_API_KEY",
        notes="Responses API with store: false; reasoning summaries stream when the model sets "
              "reasoning_effort."),
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
    "mistral": ProviderPreset(
        "openai", "https://api.mistral.ai/v1", api_key_env="MISTRAL_API_KEY",
        notes="Reasoning models send delta.content as a list of thinking and text parts."),
    "xai": ProviderPreset(
        "openai", "https://api.x.ai/v1", api_key_env="XAI_API_KEY",
        notes="completion_tokens leaves out reasoning tokens, which are billed on top; counted in."),
    "qwen": ProviderPreset(
        "openai", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", api_key_env="DASHSCOPE_API_KEY",
        notes="Alibaba Model Studio; thinking models stream delta.reasoning_content."),
    "moonshot": ProviderPreset(
        "openai", "https://api.moonshot.ai/v1", api_key_env="MOONSHOT_API_KEY",
        notes="Kimi; thinking models stream delta.reasoning_content."),
    "perplexity": ProviderPreset(
        "openai", "https://api.perplexity.ai", api_key_env="PERPLEXITY_API_KEY",
        notes="Chat completions at the root (no /v1); citations and search results ride along and are "
              "not read."),
    "gemini": ProviderPreset(
        "openai", "https://generativelanguage.googleapis.com/v1beta/openai", api_key_env="GEMINI_API_KEY",
        notes="OpenAI-compatible endpoint: tool-call chunks carry no index and end with finish_reason "
              "stop; reasoning_effort sets the thinking budget."),
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
