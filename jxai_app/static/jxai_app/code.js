// jxai chat page: code blocks and the clipboard (docs/architecture.md "The chat page").
//
// `enhanceCode(container)` runs on model text that DOMPurify already sanitised (render.js
// renderMarkdown): every <pre><code> is highlighted by highlight.js (vendored, see
// vendor/README.md) and gets a Copy button. highlight.js reads the block's textContent and
// writes back its own escaped markup (spans with `hljs-*` classes), so nothing of the model's
// becomes markup here. The Copy buttons are ours, added after sanitising (model text cannot
// make buttons: DOMPurify forbids them).

/* global hljs */

const COPIED_MS = 1500;
const sources = new WeakMap(); // rendered Markdown element -> the Markdown it was made from

if (typeof hljs !== "undefined") hljs.configure({ ignoreUnescapedHTML: true });

/** Remember the Markdown `body` was rendered from (what "Copy" of the message copies). */
export function rememberSource(body, text) {
  sources.set(body, text || "");
}

/** The Markdown `body` was rendered from, or null when it was not rendered from Markdown. */
export function sourceOf(body) {
  return sources.has(body) ? sources.get(body) : null;
}

/** A small text button with a data-testid and an accessible name. */
export function actionButton(text, testid, label) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "button action";
  button.textContent = text;
  button.dataset.testid = testid;
  button.setAttribute("aria-label", label);
  button.title = label;
  return button;
}

/** Put `text` on the clipboard; the button says "Copied" (or "Copy failed") for a moment. */
export async function copyText(text, button) {
  const idle = button.dataset.idleText || button.textContent;
  button.dataset.idleText = idle;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch {
    button.textContent = "Copy failed";
  }
  setTimeout(() => { button.textContent = idle; }, COPIED_MS);
}

/** Highlight every code block in `container` (sanitised DOM) and give each a Copy button. */
export function enhanceCode(container) {
  for (const code of container.querySelectorAll("pre > code")) {
    if (typeof hljs !== "undefined") hljs.highlightElement(code);
    const pre = code.parentElement;
    const bar = document.createElement("div");
    bar.className = "code-bar";
    const language = /\blanguage-([\w+#.-]+)/.exec(code.className);
    const name = document.createElement("span");
    name.className = "code-language";
    name.textContent = language && language[1] !== "undefined" ? language[1] : "";
    const copy = actionButton("Copy code", "copy-code", "Copy this code block");
    copy.addEventListener("click", () => copyText(code.textContent, copy));
    bar.append(name, copy);
    pre.before(bar);
  }
}
