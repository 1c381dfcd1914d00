"""The framework-free core: streaming clients, tools, the agent loop, history repair, problems,
errors, the model registry, the ``/ai/chat`` pipeline and the SSRF rules. Imports no Django
(``tests/core/test_no_django.py``)."""
