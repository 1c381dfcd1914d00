// jxai chat page: the conversation list in the sidebar, paged with "Load more".
//
// Protocol (docs/websocket.md, "Safety additions"): `list` answers with a `conversations`
// frame of at most JXAI_CONVERSATIONS_PAGE_SIZE items, most recently updated first (ties by
// id), carrying `next` only when another page follows; `list` with `before: next` asks for
// that page. `conversation` and `conversation_deleted` frames keep the list current between
// pages: an update or a new conversation moves to the top, a deletion drops the row, and the
// pages loaded so far stay. Rows are grouped by the day they were last updated, in the
// reader's time zone: Today, Yesterday, Previous 7 days, then one group per month
// (docs/architecture.md "The chat page").

import { el } from "./render.js";

/** `updatedAt` (ISO 8601, microseconds optional) as microseconds since the epoch; 0 when unreadable. */
function stamp(updatedAt) {
  const match = /^([^.]*?)(?:\.(\d+))?([zZ]|[+-]\d\d:?\d\d)?$/.exec(String(updatedAt || ""));
  if (!match) return 0;
  const millis = Date.parse(`${match[1]}${match[3] || ""}`);
  if (Number.isNaN(millis)) return 0;
  return millis * 1000 + Number(((match[2] || "") + "000000").slice(0, 6));
}

/** The server's order: most recently updated first, ties by id (descending). */
function newestFirst(a, b) {
  return stamp(b.updatedAt) - stamp(a.updatedAt) || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);
}

const DAY_MS = 24 * 60 * 60 * 1000;
const MONTH = new Intl.DateTimeFormat(undefined, { month: "long", year: "numeric" });

/** The date group of a conversation updated at `updatedAt` (ISO 8601), seen at `now`. */
export function dateGroup(updatedAt, now = new Date()) {
  const when = new Date(stamp(updatedAt) / 1000);
  const midnight = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  const day = new Date(when.getFullYear(), when.getMonth(), when.getDate()).getTime();
  const daysAgo = Math.round((midnight - day) / DAY_MS);  // DST days are 23 or 25 hours long
  if (daysAgo <= 0) return "Today";
  if (daysAgo === 1) return "Yesterday";
  if (daysAgo <= 7) return "Previous 7 days";
  return MONTH.format(when);
}

/**
 * The user's conversations as far as loaded, and their list in the sidebar.
 *
 * Options: request(frame) sends a `list` frame and returns false when not connected;
 * current() is the open conversation's id (or null); onPick(id) opens a conversation the user
 * clicked in the list.
 */
export class ConversationList {
  constructor(list, moreButton, { request, current, onPick }) {
    this.list = list;
    this.moreButton = moreButton;
    this.request = request;
    this.current = current;
    this.items = new Map();    // id -> conversation object (protocol shape)
    this.next = null;          // cursor of the page after the last one loaded
    this.pending = [];         // cursors of the `list` requests not yet answered (null: first page)
    this.live = new Set();     // ids a `conversation` frame updated since the first page was asked for
    this.deleted = new Set();  // ids deleted while this page is open (a page answered earlier may still hold them)
    list.addEventListener("click", (event) => {
      const link = event.target.closest("a[data-conversation-id]");
      if (!link || event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      onPick(link.dataset.conversationId);
    });
    moreButton.addEventListener("click", () => this.loadMore());
  }

  has(id) {
    return this.items.has(id);
  }

  get(id) {
    return this.items.get(id);
  }

  /** The first page the server rendered into the page (it carries no cursor: the socket's `list` does). */
  seed(conversations) {
    for (const conversation of conversations) if (conversation && conversation.id) this.items.set(conversation.id, conversation);
    this.render();
  }

  /** The socket (re)opened: earlier requests died with the old socket; ask for the first page again. */
  connected() {
    this.pending = [];
    this.live.clear();
    this.ask(null);
  }

  /** Ask for the page after the last one loaded (the "Load more" button). */
  loadMore() {
    if (!this.next || this.pending.includes(this.next)) return;
    this.ask(this.next);
  }

  ask(before) {
    const frame = before === null ? { type: "list" } : { type: "list", before };
    if (this.request(frame)) this.pending.push(before);
    this.render();
  }

  /** A `conversations` frame: the first page replaces the list, a later page is appended. */
  applyPage(frame) {
    const before = this.pending.length ? this.pending.shift() : null;
    const items = (frame.items || []).filter((item) => item && item.id && !this.deleted.has(item.id));
    const focusNew = document.activeElement === this.moreButton && !frame.next;
    if (before === null) {
      const fresh = new Map(items.map((item) => [item.id, item]));
      // Frames that overtook the page's answer are as new as it, or newer; keep the open one too.
      for (const id of [...this.live, this.current()]) {
        const known = id && this.items.get(id);
        if (known && (!fresh.has(id) || stamp(known.updatedAt) >= stamp(fresh.get(id).updatedAt))) fresh.set(id, known);
      }
      this.items = fresh;
    } else {
      for (const item of items) {
        const known = this.items.get(item.id);
        if (!known || stamp(item.updatedAt) > stamp(known.updatedAt)) this.items.set(item.id, item);
      }
    }
    this.next = typeof frame.next === "string" && frame.next ? frame.next : null;
    this.render();
    if (focusNew && before !== null && items.length) {
      // The button went away under the keyboard: carry focus to the first row it brought.
      const link = this.list.querySelector(`a[data-conversation-id="${CSS.escape(items[0].id)}"]`);
      if (link) link.focus();
    }
  }

  /** An `error` frame answered a `list` (e.g. a stale cursor): let the button be pressed again. */
  pageFailed() {
    this.pending.shift();
    this.render();
  }

  /** A `conversation` frame (created or changed); true when it was new to this page. */
  upsert(conversation) {
    const known = this.items.has(conversation.id);
    this.items.set(conversation.id, { ...(this.items.get(conversation.id) || {}), ...conversation });
    this.live.add(conversation.id);
    this.render();
    return !known;
  }

  /** A `conversation_deleted` frame. */
  remove(id) {
    this.items.delete(id);
    this.live.delete(id);
    this.deleted.add(id);
    this.render();
  }

  render() {
    const currentId = this.current();
    const now = new Date();
    const groups = new Map(); // label -> <ul> of its rows, newest group first
    for (const conversation of [...this.items.values()].sort(newestFirst)) {
      if (conversation.temporary) continue; // kept for the header, never listed (docs/data.md "Temporary chats")
      const label = dateGroup(conversation.updatedAt, now);
      if (!groups.has(label)) groups.set(label, el("ul", "conversation-group"));
      groups.get(label).append(this.row(conversation, currentId));
    }
    this.list.replaceChildren(...[...groups].map(([label, rows]) => {
      const group = el("li", "date-group");
      group.append(el("h2", "date-group-title", label, "date-group"), rows);
      return group;
    }));
    const loading = this.pending.some((cursor) => cursor !== null);
    this.moreButton.hidden = !this.next;
    // aria-disabled, not disabled: a disabled button drops keyboard focus (see applyPage).
    this.moreButton.setAttribute("aria-disabled", String(loading));
    this.moreButton.textContent = loading ? "Loading…" : "Load more";
  }

  /** One conversation's row: a link to it. */
  row(conversation, currentId) {
    const link = el("a", "conversation-link", null, "conversation-link");
    link.href = `/c/${conversation.id}`;
    link.dataset.conversationId = conversation.id;
    link.append(el("span", "conversation-link-title", conversation.title || "Untitled"));
    if (conversation.status === "streaming") link.append(el("span", "badge", "answering"));
    else if (conversation.status === "awaiting_approval") link.append(el("span", "badge", "needs your approval"));
    if (conversation.id === currentId) link.setAttribute("aria-current", "page");
    const li = el("li");
    li.append(link);
    return li;
  }
}
