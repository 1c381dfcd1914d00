"""jxai: a Django app hosting a multi-user LLM assistant (the package map: ``docs/architecture.md``).

Kept empty on purpose: :mod:`jxai_app.core` must import without Django settings.
"""
