// jxai chat page: share links (docs/data.md "Share links"). The Share dialog makes a link
// for the open conversation; Settings lists the user's links with "Update link" and Revoke.
// Share actions are plain HTTP (POST /shares, /shares/<id>/update, /shares/<id>/revoke; GET
// /shares), not websocket frames: the share page itself has no socket, and a link is no
// live state of a conversation. Requests carry the page's CSRF token.

import { el } from "./render.js";

const SCOPE_LABELS = { signed_in: "Signed-in users", groups: "Chosen groups", public: "Anyone with the link" };

function csrfToken() {
  const field = document.querySelector("input[name=csrfmiddlewaretoken]");
  return field ? field.value : "";
}

/** `fetch` with the CSRF token; resolves to the JSON body (null for 204), rejects with the problem's detail. */
async function call(url, { method = "GET", body } = {}) {
  const headers = { "X-CSRFToken": csrfToken() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, { method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body) });
  const data = response.status === 204 ? null : await response.json().catch(() => null);
  if (!response.ok) throw new Error((data && data.detail) || `The server answered ${response.status}.`);
  return data;
}

// Day month year, 24-hour clock, no seconds: the share page's own format ("2 Dec 2026, 14:05 UTC").
const DATE_TIME = new Intl.DateTimeFormat("en-GB", { day: "numeric", month: "short", year: "numeric",
  hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "short" });

function when(iso) {
  return iso ? DATE_TIME.format(new Date(iso)) : "never";
}

/**
 * The Share dialog. `ui`: {open, dialog, form, scope, groups, expiry, status, link, linkRow, copy, close, create}.
 * Options: current() is the open conversation's id.
 */
export class ShareDialog {
  constructor(ui, { current }) {
    this.ui = ui;
    this.current = current;
    ui.open.addEventListener("click", () => this.open());
    ui.close.addEventListener("click", () => ui.dialog.close());
    ui.copy.addEventListener("click", () => this.copy());
    ui.scope.addEventListener("change", () => { ui.groups.hidden = ui.scope.value !== "groups"; });
    ui.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.create();
    });
  }

  async open() {
    const ui = this.ui;
    ui.linkRow.hidden = true;
    ui.link.textContent = "";
    ui.create.disabled = true;
    this.status("Loading…");
    ui.dialog.showModal();
    try {
      const { scopes, groups } = await call("/shares");
      ui.scope.replaceChildren(...scopes.map((scope) => {
        const option = el("option", null, SCOPE_LABELS[scope] || scope);
        option.value = scope;
        return option;
      }));
      ui.groups.replaceChildren(el("legend", null, "Groups"), ...groups.map((group) => {
        const label = el("label");
        const box = el("input");
        box.type = "checkbox";
        box.value = String(group.id);
        label.append(box, ` ${group.name}`);
        return label;
      }));
      ui.groups.hidden = true;
      ui.create.disabled = false;
      this.status("");
    } catch (error) {
      this.status(error.message, true);
    }
  }

  async create() {
    const ui = this.ui;
    const body = { conversationId: this.current(), scope: ui.scope.value,
      expiresInDays: ui.expiry.value ? Number(ui.expiry.value) : null };
    if (body.scope === "groups") {
      body.groups = [...ui.groups.querySelectorAll("input:checked")].map((box) => Number(box.value));
    }
    ui.create.disabled = true;
    this.status("Creating the link…");
    try {
      const share = await call("/shares", { method: "POST", body });
      ui.link.textContent = share.url;
      ui.linkRow.hidden = false;
      // Stays disabled until the dialog opens again: a second press would make a second link.
      this.status("Link created. Copy it now: it is shown only once.");
      ui.copy.focus();
    } catch (error) {
      this.status(error.message, true);
      ui.create.disabled = false;
    }
  }

  /** Copy the link to the clipboard; where the browser refuses, the link stays selectable. */
  async copy() {
    try {
      await navigator.clipboard.writeText(this.ui.link.textContent);
      this.status("Link copied to the clipboard. It is shown only once.");
    } catch {
      this.status("The browser did not allow copying: select the link and copy it by hand.", true);
    }
  }

  status(text, error = false) {
    this.ui.status.textContent = text;
    this.ui.status.hidden = !text;
    this.ui.status.dataset.kind = error ? "error" : "";
  }
}

/** The user's links in Settings. `ui`: {list, empty}; `load()` on each opening of the dialog. */
export class ShareList {
  constructor(ui) {
    this.ui = ui;
  }

  async load() {
    try {
      const { shares } = await call("/shares");
      this.render(shares);
    } catch (error) {
      this.ui.empty.textContent = error.message;
      this.ui.empty.hidden = false;
    }
  }

  render(shares) {
    this.ui.empty.hidden = shares.length > 0;
    this.ui.list.replaceChildren(...shares.map((share) => this.row(share)));
  }

  row(share) {
    const li = el("li", null, null, "share-item");
    const scope = share.scope === "groups"
      ? `${SCOPE_LABELS.groups}: ${share.groups.map((g) => g.name).join(", ")}` : SCOPE_LABELS[share.scope];
    const update = el("button", "button", "Update link", "share-update");
    update.type = "button";
    update.title = "Share the conversation as it is now";
    update.addEventListener("click", () => this.act(share, "update", update));
    const revoke = el("button", "button danger", "Revoke", "share-revoke");
    revoke.type = "button";
    revoke.addEventListener("click", () => this.act(share, "revoke", revoke));
    li.append(el("strong", null, share.title || "Untitled"),
      el("span", "dialog-help", `${scope} · shared ${when(share.snapshotAt)} · expires ${when(share.expiresAt)} · `
        + `${share.viewCount} view${share.viewCount === 1 ? "" : "s"}`), update, revoke);
    return li;
  }

  async act(share, action, button) {
    button.disabled = true;
    try {
      await call(`/shares/${share.id}/${action}`, { method: "POST" });
      await this.load();
    } catch (error) {
      button.disabled = false;
      button.title = error.message;
    }
  }
}
