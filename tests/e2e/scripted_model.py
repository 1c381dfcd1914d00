"""The model the browser tests talk to: a :class:`FakeProvider` handler that picks its answer
from the conversation it is sent, so each test chooses a behaviour by what it types.

The last message decides (a question with attachments: its text parts):

* a ``tool`` message (a tool round just ran) → a short text answer quoting the result;
* a user message that mentions the **calculator** → one streamed ``calculate`` call
  (``6 * 7``) after a line of text;
* a user message starting with a tag:

  ``[note]``   one ``save_note`` call whose text is the rest of the message (a tool whose
               calls wait for the user's approval, docs/approval.md);
  ``[slow]``   300 words, 60 ms apart (about 18 s; for Stop, a second tab, screenshots);
  ``[fail]``   ``503`` until :meth:`ScriptedModel.heal` is called for that exact text;
  ``[xss]``    the answer of :data:`XSS_ANSWER` (the leak URL filled in);
  ``[think]``  reasoning (``reasoning_content``) first, then the answer;
  ``[long]``   :data:`LONG_CHARS` characters of numbered words (:func:`long_words`), in
               4,000-character chunks (larger than any websocket message the server sends);
  ``[code]``   a sentence and a fenced Python block (:data:`CODE_ANSWER`), for highlighting and Copy;
  ``[cut]``    a short answer that ends with ``finish_reason: "length"``, as an answer cut
               at ``JXAI_MAX_ANSWER_CHARS`` (or the model's own limit) ends;
  ``[break]``  a few words, then an error event in the stream (a provider failing mid-answer);
  ``[tool NAME]`` one streamed call of tool ``NAME`` with no arguments (an MCP tool, say);
  anything else: ``Hello! You said: …`` in a few chunks with a Markdown list.

Every answer ends with a ``usage`` chunk so the page has a token count to show.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.support.fake_provider import (
    Request, Script, json_response, openai_chunk, openai_text_stream, openai_tool_call_stream, sse_json,
)

REASONING = ["The user asks ", "for a capital. ", "France's capital is Paris."]
USAGE = {"prompt_tokens": 812, "completion_tokens": 64, "total_tokens": 876}
SLOW_WORDS = 300
SLOW_DELAY = 0.06
LONG_CHARS = 2_000_000


def long_words(chars: int = LONG_CHARS) -> str:
    """The ``[long]`` answer: ``w000000 w000001 …`` (8 characters a word), ``chars`` long."""
    return "".join(f"w{i:06d} " for i in range(chars // 8))

CODE_ANSWER = """Here is a function:

```python
def greet(name):
    return f"Hello, {name}!"
```

Call it with `greet("Ada")`."""
CODE_BLOCK = 'def greet(name):\n    return f"Hello, {name}!"\n'
"""The block's text as the page's Copy puts it on the clipboard."""

XSS_ANSWER = """Here are some things that must stay inert:

<img src=x onerror="window.__pwned='img-onerror';alert('img')">

<script>window.__pwned='script';alert('script')</script>

[click me](javascript:window.__pwned='js-link';alert('link'))

<a href="javascript:window.__pwned='raw-link'">raw link</a>

<svg onload="window.__pwned='svg';alert('svg')"><circle r="5"/></svg>

<iframe src="javascript:window.__pwned='iframe'"></iframe>

<div style="background:url({leak}&via=css)" data-testid="message-user">styled</div>

<form action="{leak}&via=form"><button formaction="{leak}">go</button></form>

<details open ontoggle="window.__pwned='details'">x</details>

![tracking pixel]({leak}&via=markdown)

<img src="{leak}&via=html" alt="leak">

<a href="https://example.com/docs">a normal link</a>

Done: **bold** still works."""
"""Payloads from the usual cheat sheets; ``{leak}`` becomes a URL on the fake provider, which
records every request it gets, so a fetch of it is visible to the test."""


class ScriptedModel:
    """A ``FakeProvider`` handler (see the module docstring). Thread-safe.

    Args:
        leak_url: the URL the XSS answer tries to make the browser fetch (``?q=secret``).
    """

    def __init__(self, leak_url: str) -> None:
        self.leak_url = leak_url
        self._healed: set[str] = set()
        self._lock = threading.Lock()

    def heal(self, text: str) -> None:
        """From now on, answer the ``[fail]`` message ``text`` normally."""
        with self._lock:
            self._healed.add(text)

    def __call__(self, request: Request) -> Script:
        body: dict[str, Any] = request.json if isinstance(request.json, dict) else {}
        messages = body.get("messages") or [{}]
        last = messages[-1]
        if last.get("role") == "tool":
            return Script(writes=openai_text_stream(["The result ", "is **42**", " (from the calculator)."],
                                                    usage=USAGE), delay=0.03)
        content = last.get("content")
        if isinstance(content, list):  # a question with attachments: its text parts decide
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        text = str(content or "")
        if "calculator" in text.lower():
            return Script(writes=openai_tool_call_stream("call_calc_1", "calculate", ['{"expression"', ': "6 * 7"}'],
                                                         text=["Let me work that out."], usage=USAGE), delay=0.05)
        if text.startswith("[note]"):
            note = json.dumps({"text": text[len("[note]"):].strip()})
            return Script(writes=openai_tool_call_stream("call_note_1", "save_note", [note[:10], note[10:]],
                                                         usage=USAGE), delay=0.02)
        if text.startswith("[tool ") and "]" in text:
            name = text[len("[tool "):text.index("]")]
            return Script(writes=openai_tool_call_stream("call_tool_1", name, ["{}"], usage=USAGE), delay=0.03)
        if text.startswith("[slow]"):
            words = [f"word{i} " for i in range(SLOW_WORDS)]
            return Script(writes=openai_text_stream(words, usage=USAGE), delay=SLOW_DELAY)
        if text.startswith("[fail]"):
            with self._lock:
                healed = text in self._healed
            if not healed:
                return json_response(503, {"error": {"message": "The fake provider is overloaded.",
                                                     "type": "overloaded_error"}})
            return Script(writes=openai_text_stream(["Recovered: ", "this time it worked."], usage=USAGE),
                          delay=0.02)
        if text.startswith("[xss]"):
            answer = XSS_ANSWER.replace("{leak}", self.leak_url)
            parts = [answer[i:i + 40] for i in range(0, len(answer), 40)]
            return Script(writes=openai_text_stream(parts, usage=USAGE), delay=0.01)
        if text.startswith("[long]"):
            answer = long_words()
            return Script(writes=openai_text_stream([answer[i:i + 4000] for i in range(0, len(answer), 4000)],
                                                    usage=USAGE))
        if text.startswith("[code]"):
            return Script(writes=openai_text_stream([CODE_ANSWER[i:i + 30] for i in range(0, len(CODE_ANSWER), 30)],
                                                    usage=USAGE), delay=0.01)
        if text.startswith("[cut]"):
            return Script(writes=openai_text_stream(["This answer stops ", "in the mid"], finish="length",
                                                    usage=USAGE), delay=0.02)
        if text.startswith("[break]"):
            words = openai_text_stream(["This answer starts ", "and then"], finish=None, done=False)
            failure = sse_json({"error": {"message": "The fake provider went away.", "type": "server_error"}})
            return Script(writes=[*words, failure], delay=0.02)
        if text.startswith("[think]"):
            thoughts = [openai_chunk({"reasoning_content": part}) for part in REASONING]
            answer = openai_text_stream(["Paris ", "is the capital of France."], usage=USAGE)
            return Script(writes=answer[:1] + thoughts + answer[1:], delay=0.02)
        return Script(writes=openai_text_stream(
            ["Hello! ", "You said: ", text, "\n\n", "- first point\n", "- second point\n"], usage=USAGE),
            delay=0.03)
