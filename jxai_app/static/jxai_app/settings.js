// jxai chat page: the settings dialog (issue 15 item 5; frames in docs/websocket.md
// "Search, feedback and custom instructions"). It holds the user's custom instructions,
// which the server adds to the system prompt of each new turn. Opening the dialog reads them
// (`instructions` without text), Save sends them; an `instructions` frame answers both.

/**
 * `ui`: {open, dialog, form, text, count, status, cancel}. Options: request(frame) sends a
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
    ui.open.addEventListener("click", () => this.open());
    ui.cancel.addEventListener("click", () => ui.dialog.close());
    ui.text.addEventListener("input", () => this.count());
    ui.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.saving = this.request({ type: "instructions", text: ui.text.value });
      this.status(this.saving ? "Saving…" : "Not connected; try again in a moment.");
    });
  }

  open() {
    const ui = this.ui;
    this.saving = false;
    ui.text.disabled = !this.request({ type: "instructions" });
    this.status(ui.text.disabled ? "Not connected; try again in a moment." : "");
    ui.dialog.showModal();
    ui.text.focus();
    this.count();
  }

  /** An `instructions` frame: the saved text (after a read or a save). */
  apply(frame) {
    const ui = this.ui;
    ui.text.disabled = false;
    ui.text.value = frame.text || "";
    if (frame.maxChars) ui.text.maxLength = frame.maxChars;
    this.count();
    if (this.saving) {
      this.saving = false;
      ui.dialog.close();
      this.announce("Custom instructions saved; they apply from your next message.");
    }
  }

  /** An `error` frame answering `instructions`. */
  failed(message) {
    this.saving = false;
    this.ui.text.disabled = false;
    this.status(message);
  }

  count() {
    const ui = this.ui;
    ui.count.textContent = `${ui.text.value.length} / ${ui.text.maxLength} characters`;
  }

  status(text) {
    this.ui.status.textContent = text;
    this.ui.status.hidden = !text;
  }
}
