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
