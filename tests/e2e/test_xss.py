"""Model output is inert in the page (docs/security.md, threat 6).

A prompt injection can make the model write anything. Its answer is rendered by marked and
sanitised by DOMPurify with our hooks, under a CSP without ``unsafe-inline``. Each payload
below, if it worked, would set ``window.__pwned``, open a dialog, or make the browser fetch a
URL on the fake provider (which records every request it receives).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import BrowserPage
from tests.e2e.steps import ask, reload

pytestmark = pytest.mark.browser

# Cheat-sheet payloads (OWASP XSS filter evasion, PortSwigger, DOMPurify's mXSS reports),
# fed to the page's own renderer. LEAK is replaced by a URL on the fake provider.
CHEAT_SHEET = [
    "<img src=x onerror=\"window.__pwned='img'\">",
    "<IMG SRC=\"jav&#x09;ascript:window.__pwned='tab'\">",
    "<svg><script>window.__pwned='svg-script'</script></svg>",
    "<svg/onload=\"window.__pwned='svg-onload'\">",
    "<math><mtext><table><mglyph><style><img src=x onerror=\"window.__pwned='mxss-math'\">",
    "<svg></p><style><a id=\"</style><img src=1 onerror=\"window.__pwned='mxss-style'\">\">",
    "<noscript><p title=\"</noscript><img src=x onerror=\"window.__pwned='noscript'\">\">",
    "<a href=\"jAvAsCrIpT:window.__pwned='case'\">x</a>",
    "<a href=\"&#106;avascript:window.__pwned='entity'\">x</a>",
    "<a href=\" javascript:window.__pwned='space'\">x</a>",
    "[md](javascript:window.__pwned='md-link')",
    "[md](vbscript:msgbox(1))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "<a href=\"data:text/html,<script>window.__pwned='data'</script>\">d</a>",
    "<iframe srcdoc=\"<script>parent.__pwned='srcdoc'</script>\"></iframe>",
    "<object data=\"javascript:window.__pwned='object'\"></object>",
    "<embed src=\"javascript:window.__pwned='embed'\">",
    "<body onload=\"window.__pwned='body'\">",
    "<input autofocus onfocus=\"window.__pwned='autofocus'\">",
    "<video><source onerror=\"window.__pwned='video'\"></video>",
    "<audio src=x onerror=\"window.__pwned='audio'\">",
    "<details open ontoggle=\"window.__pwned='details'\">d</details>",
    "<marquee onstart=\"window.__pwned='marquee'\">m</marquee>",
    "<meta http-equiv=\"refresh\" content=\"0;url=javascript:window.__pwned='meta'\">",
    "<base href=\"javascript:/\"><a href=\"/x\">base</a>",
    "<form><button formaction=\"javascript:window.__pwned='formaction'\">b</button></form>",
    "<link rel=stylesheet href=\"LEAK&via=link\">",
    "<style>@import 'LEAK&via=import';</style>",
    "<div style=\"background:url('LEAK&via=style')\">s</div>",
    "<img srcset=\"LEAK&via=srcset 1x\">",
    "<img src=\"LEAK&via=img\">",
    "![pixel](LEAK&via=markdown-image)",
    "<picture><source srcset=\"LEAK&via=picture\"><img src=x></picture>",
    "<video poster=\"LEAK&via=poster\"></video>",
    "<a href=\"https://example.com\" ping=\"LEAK&via=ping\">ping</a>",
    "<p data-testid=\"message-user\" class=\"banner error\" id=\"composer\">forged hooks</p>",
]


def assert_inert(recorded: BrowserPage, scope: Any, fake: Any) -> None:
    page = recorded.page
    assert page.evaluate("window.__pwned") is None
    assert recorded.dialogs == []
    assert recorded.errors == []
    assert not [url for url in recorded.requests if "/leak" in url]
    assert not [r for r in fake.requests if r.path.startswith("/leak")]
    assert scope.locator("script, iframe, object, embed, svg, math, style, link, meta, base, form, input, "
                         "button, video, audio, picture, source").count() == 0
    found = scope.evaluate("""root => {
        const bad = [];
        for (const node of root.querySelectorAll('*')) {
            for (const attr of node.attributes) {
                const name = attr.name.toLowerCase();
                if (name.startsWith('on') || name === 'style' || name === 'srcset' || name === 'ping'
                    || name.startsWith('data-')) bad.push(node.tagName + ' ' + name);
                if (/^(href|src|action|formaction|poster|background)$/.test(name)
                    && /^\\s*(javascript|vbscript|data:text)/i.test(attr.value)) bad.push(node.tagName + ' ' + name);
            }
            if (node.tagName === 'IMG' && !node.src.startsWith(location.origin + '/') && !node.src.startsWith('data:image/'))
                bad.push('IMG ' + node.src);
            if (node.tagName === 'A' && node.hasAttribute('href')
                && (node.target !== '_blank' || node.rel !== 'noopener noreferrer')) bad.push('A ' + node.href);
            if (node.tagName !== 'CODE' && node.hasAttribute('class') && node.className !== 'blocked-image')
                bad.push(node.tagName + ' class=' + node.className);
        }
        return bad;
    }""")
    assert found == []


def test_a_hostile_answer_renders_inert_live_and_after_reload(logged_in: Any, fake_llm: Any) -> None:
    fake, model = fake_llm
    tab = logged_in()
    page = tab.page
    answer = ask(tab, "[xss] summarise this web page", until="still works")
    page.get_by_test_id("send").wait_for()
    page.wait_for_timeout(300)                       # let any image or handler have its chance
    body = answer.locator(".message-body")
    assert_inert(tab, body, fake)
    # What must survive: ordinary Markdown, a safe link (opened safely), the blocked images noted.
    assert body.locator("strong").inner_text() == "bold"
    link = body.get_by_role("link", name="a normal link")
    assert link.get_attribute("href") == "https://example.com/docs"
    assert link.get_attribute("rel") == "noopener noreferrer" and link.get_attribute("target") == "_blank"
    assert body.locator(".blocked-image").count() >= 2
    assert page.get_by_test_id("message-user").count() == 1       # the forged hook was stripped

    reload(tab)                                      # the saved answer goes through the same path
    answer = page.get_by_test_id("message-assistant").first
    answer.get_by_text("still works").wait_for()
    page.wait_for_timeout(300)
    assert_inert(tab, answer.locator(".message-body"), fake)


def test_cheat_sheet_payloads_through_the_page_renderer(logged_in: Any, fake_llm: Any) -> None:
    fake, model = fake_llm
    tab = logged_in()
    page = tab.page
    payloads = [p.replace("LEAK", model.leak_url) for p in CHEAT_SHEET]
    page.evaluate("""async (payloads) => {
        const { renderMarkdown } = await import('/static/jxai_app/render.js');
        const root = document.createElement('div');
        root.id = 'xss-lab';
        document.body.append(root);           // attached: anything that could load or run, would
        for (const text of payloads) {
            const box = document.createElement('div');
            root.append(box);
            renderMarkdown(box, text);
        }
    }""", payloads)
    page.wait_for_timeout(500)
    lab = page.locator("#xss-lab")
    assert lab.locator(":scope > div").count() == len(payloads)
    assert_inert(tab, lab, fake)
    assert page.evaluate("document.getElementById('composer').tagName") == "TEXTAREA"   # no clobbering
    assert lab.get_by_text("forged hooks").count() == 1
