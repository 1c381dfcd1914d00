"""jxai: a Django app hosting a multi-user LLM assistant.

Kept empty on purpose: the core (``jxai_app.streaming``, ``jxai_app.tools``,
``jxai_app.agent``, ``jxai_app.problems``, ``jxai_app.errors``) imports without Django
settings (STYLE.md guard test).
"""
