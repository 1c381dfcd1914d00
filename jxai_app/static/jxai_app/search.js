// jxai chat page: the search box above the conversation list (docs/store.md "Search"; frames in
// docs/websocket.md "Search, feedback and custom instructions").
//
// Typing sends a `search` frame (after a short pause); the `search_results` frame for the
// text still in the box replaces the results, which take the list's place while the box
// holds text. A result links to its conversation (`/c/<id>`) and, for a message match, to the
// message (`#message-<id>`); picking one opens the conversation (on the message's branch) and scrolls to the message.
// Results are the user's own: the server scopes the search to the owner.

import { el } from "./render.js";

const PAUSE_MS = 250;

/** `#message-<id>` of a location hash as a number, or null. */
export function messageFromHash(hash) {
  const match = /^#message-(\d+)$/.exec(hash || "");
  return match ? Number(match[1]) : null;
}

/** `text` as nodes, the query's words marked (<mark>; a stemmed match is not marked); Markdown
 * emphasis markers left out. */
function withMarks(text, query) {
  const plain = String(text || "").replace(/\*\*|__|`/g, "");
  const words = query.split(/\s+/).map((word) => word.replace(/^[-"]+|"+$/g, "")).filter(Boolean)
    .map((word) => word.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  if (!words.length) return [document.createTextNode(plain)];
  const nodes = [];
  let last = 0;
  for (const match of plain.matchAll(new RegExp(words.join("|"), "gi"))) {
    nodes.push(document.createTextNode(plain.slice(last, match.index)), el("mark", "", match[0]));
    last = match.index + match[0].length;
  }
  nodes.push(document.createTextNode(plain.slice(last)));
  return nodes;
}

/**
 * Options: request(frame) sends a frame (false when not connected); onPick(conversationId,
 * messageId | null) opens a result.
 */
export class SearchBox {
  constructor({ input, results, nav }, { request, onPick }) {
    this.input = input;
    this.results = results;
    this.nav = nav;
    this.request = request;
    this.sent = "";
    this.timer = null;
    input.addEventListener("input", () => this.typed());
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && input.value) {
        event.preventDefault();
        event.stopPropagation();
        this.clear();
      }
    });
    results.addEventListener("click", (event) => {
      const link = event.target.closest("a[data-conversation-id]");
      if (!link || event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      onPick(link.dataset.conversationId, link.dataset.messageId ? Number(link.dataset.messageId) : null);
    });
  }

  get query() {
    return this.input.value.trim();
  }

  typed() {
    clearTimeout(this.timer);
    const searching = Boolean(this.query);
    this.nav.classList.toggle("searching", searching);
    this.results.hidden = !searching;
    if (!searching) {
      this.sent = "";
      this.results.replaceChildren();
      return;
    }
    this.timer = setTimeout(() => this.ask(), PAUSE_MS);
  }

  /** Ask again for what the box holds (the socket reopened, or the pause is over). */
  ask() {
    const query = this.query;
    if (query && this.request({ type: "search", query })) this.sent = query;
  }

  clear() {
    this.input.value = "";
    this.typed();
  }

  /** A `search_results` frame; answers to an older text are ignored. */
  apply(frame) {
    if (frame.query !== this.sent || frame.query !== this.query) return;
    const items = frame.items || [];
    if (!items.length) {
      this.results.replaceChildren(el("li", "search-empty", `Nothing found for “${frame.query}”.`));
      return;
    }
    this.results.replaceChildren(...items.map((item) => {
      const link = el("a", "search-result", null, "search-result");
      link.href = item.messageId == null ? `/c/${item.conversationId}` : `/c/${item.conversationId}#message-${item.messageId}`;
      link.dataset.conversationId = item.conversationId;
      if (item.messageId != null) link.dataset.messageId = String(item.messageId);
      const snippet = el("span", "search-result-snippet");
      snippet.append(...(item.messageId == null ? [document.createTextNode("matches the title")]
        : withMarks(item.snippet, frame.query)));
      link.append(el("span", "search-result-title", item.title || "Untitled"), snippet);
      const li = el("li");
      li.append(link);
      return li;
    }));
  }
}
