// jxai chat page: the settings dialog (docs/store.md "Custom instructions"; frames in
// docs/websocket.md "Search, feedback and custom instructions"). It holds the user's custom instructions,
// which the server adds to the system prompt of each new turn. Opening the dialog reads them
// (`instructions` without text), Save sends them; an `instructions` frame answers both.

/**
 * `ui`: {open, dialog, form, text, count, status, cancel, save, saved (the note beside Settings)}. Options: request(frame) sends a
 * frame (false when not connected); maxChars is the length limit; announce(text) tells
 * screen readers.
 */
export class SettingsDialog {
  constructor(ui, { request, maxChars, announce }) {
    this.ui = ui;
    this.request = request;
    this.announce = announce;
    this.saving = false;
    ui.text.maxLength = maxChars;
    ui.open.addEventListener("click", () => {
      ui.saved.hidden = true;
      this.open();
    });
    ui.cancel.addEventListener("click", () => ui.dialog.close());
    ui.text.addEventListener("input", () => this.count());
    ui.form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (ui.save.disabled) return;
      this.saving = this.request({ type: "instructions", text: ui.text.value });
      this.busy(this.saving);
      this.status(this.saving ? "Saving…" : "Not connected; try again in a moment.");
    });
  }

  /** Open the dialog; the box waits for the saved text (it may have changed in another tab). */
  open() {
    const ui = this.ui;
    this.saving = false;
    const asked = this.request({ type: "instructions" });
    this.busy(asked);
    this.status(asked ? "Loading…" : "Not connected; try again in a moment.");
    ui.dialog.showModal();
    this.count();
  }

  /** While a read or a save is on its way, the box and Save wait. */
  busy(on) {
    this.ui.text.disabled = on;
    this.ui.save.disabled = on;
  }

  /** An `instructions` frame: the saved text (after a read or a save). */
  apply(frame) {
    const ui = this.ui;
    this.busy(false);
    this.status("");
    ui.text.value = frame.text || "";
    if (frame.maxChars) ui.text.maxLength = frame.maxChars;
    this.count();
    if (this.saving) {
      this.saving = false;
      ui.dialog.close();
      ui.saved.hidden = false; // seen beside Settings until the dialog opens again
      this.announce("Custom instructions saved; they apply from your next message.");
    } else if (ui.dialog.open) {
      ui.text.focus();
    }
  }

  /** An `error` frame answering `instructions`. */
  failed(message) {
    this.saving = false;
    this.busy(false);
    this.status(message, true);
  }

  count() {
    const ui = this.ui;
    ui.count.textContent = `${ui.text.value.length} / ${ui.text.maxLength} characters`;
  }

  status(text, error = false) {
    this.ui.status.textContent = text;
    this.ui.status.hidden = !text;
    this.ui.status.dataset.kind = error ? "error" : "";
  }
}

/** The CSRF token Django put in the page's forms (the logout form has one). */
function csrfToken() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  return input ? input.value : "";
}

/** The problem document's words, or a fallback (docs/api.md "Problem documents"). */
async function problemText(response) {
  try {
    const body = await response.json();
    const skipped = (body.skipped || []).map((s) => `${s.title || `#${s.index + 1}`}: ${s.reason}`);
    return [body.detail || body.title || `Failed (HTTP ${response.status}).`, ...skipped].join(" · ");
  } catch {
    return `Failed (HTTP ${response.status}).`;
  }
}

/**
 * Your data, in the settings dialog (docs/data.md): "Download my data" is a plain link; the
 * import sends the chosen file to `importUrl`; "Delete my account" posts what its field asks
 * (the password, or the username for an account without one: the field's `name`, chosen by the
 * server, docs/data.md "Erasure") to `deleteUrl` and, once done, leaves for the login page.
 * `ui`: {importInput, importStatus, deleteForm, confirm, deleteButton, deleteStatus}.
 * Options: importUrl, deleteUrl, loginUrl, onImported() (refresh the list), announce(text).
 */
export class DataControls {
  constructor(ui, { importUrl, deleteUrl, loginUrl, onImported, announce }) {
    this.ui = ui;
    ui.importInput.addEventListener("change", async () => {
      const file = ui.importInput.files[0];
      if (!file) return;
      const body = new FormData();
      body.append("file", file);
      show(ui.importStatus, "Importing…");
      ui.importInput.disabled = true;
      try {
        const response = await fetch(importUrl, { method: "POST", body, headers: { "X-CSRFToken": csrfToken() } });
        if (!response.ok) {
          show(ui.importStatus, await problemText(response), true);
          return;
        }
        const report = await response.json();
        const skipped = report.skipped.map((s) => `${s.title || `#${s.index + 1}`}: ${s.reason}`);
        const files = report.skipped_attachments.map((s) => `${s.name || "a file"}: ${s.reason}`);
        const count = report.imported.length;
        const text = `Imported ${count} ${count === 1 ? "conversation" : "conversations"}.`
          + (skipped.length ? ` Skipped ${skipped.length}: ${skipped.join(" · ")}` : "")
          + (files.length ? ` Files left out (their messages kept) ${files.length}: ${files.join(" · ")}` : "");
        show(ui.importStatus, text, skipped.length + files.length > 0);
        announce(text);
        onImported();
      } catch {
        show(ui.importStatus, "The import did not reach the server; try again.", true);
      } finally {
        ui.importInput.disabled = false;
        ui.importInput.value = "";
      }
    });
    ui.deleteForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      ui.deleteButton.disabled = true;
      show(ui.deleteStatus, "Deleting…");
      try {
        const response = await fetch(deleteUrl, {
          method: "POST", headers: { "X-CSRFToken": csrfToken(), "Content-Type": "application/json" },
          body: JSON.stringify({ [ui.confirm.name]: ui.confirm.value }),
        });
        if (response.ok) {
          window.location.assign(loginUrl);
          return;
        }
        show(ui.deleteStatus, await problemText(response), true);
      } catch {
        show(ui.deleteStatus, "The request did not reach the server; try again.", true);
      }
      ui.deleteButton.disabled = false;
    });
  }
}

function show(element, text, error = false) {
  element.textContent = text;
  element.hidden = !text;
  element.dataset.kind = error ? "error" : "";
}
