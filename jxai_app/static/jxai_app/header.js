// jxai chat page: what the page shows about the open conversation outside the transcript.
// The top bar (title, the temporary chat marker, Rename, Delete) and the composer's meta line (model picker, token
// count, context warning), docs/architecture.md "The chat page".

import { el } from "./render.js";

/**
 * The open conversation's title, rename/delete controls, model picker and token count.
 *
 * `ui` holds the elements: title, temporaryMarker, renameButton, deleteButton, renameForm, renameInput,
 * renameCancel, model, tokens, warning. Options: models ([{alias, label}]), defaultModel
 * (alias), onRename(title) and onDelete() act on the conversation last rendered.
 */
export class Header {
  constructor(ui, { models, defaultModel, onRename, onDelete }) {
    this.ui = ui;
    this.defaultModel = defaultModel;
    this.conversation = null;
    this.modelShownFor = undefined;   // the conversation whose model the picker last showed
    this.renderModels(models || []);
    ui.renameButton.addEventListener("click", () => this.beginRename());
    ui.renameCancel.addEventListener("click", () => this.endRename());
    ui.renameInput.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        this.endRename();
      }
    });
    ui.renameForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const title = ui.renameInput.value.trim();
      if (title && this.conversation) onRename(title);
      this.endRename();
    });
    ui.deleteButton.addEventListener("click", () => {
      const conversation = this.conversation;
      if (conversation && window.confirm(`Delete “${conversation.title || "Untitled"}”? This cannot be undone.`)) {
        onDelete();
      }
    });
  }

  /** The model alias the user picked (null when there is none to pick). */
  get model() {
    return this.ui.model.value || null;
  }

  /** Show `conversation` (a protocol conversation object), or a new chat for null. */
  render(conversation) {
    const ui = this.ui;
    this.conversation = conversation || null;
    const title = conversation ? conversation.title || "Untitled" : "New chat";
    ui.title.textContent = title;
    document.title = `${title} · jxai`;
    ui.temporaryMarker.hidden = !(conversation && conversation.temporary);
    ui.renameButton.hidden = !conversation;
    ui.deleteButton.hidden = !conversation;
    const shownFor = conversation ? conversation.id : null;
    if (this.modelShownFor !== shownFor) {
      // The picker follows the conversation when it is opened, then stays as the user sets it.
      this.modelShownFor = shownFor;
      const alias = conversation && conversation.model ? conversation.model : this.defaultModel;
      if ([...ui.model.options].some((o) => o.value === alias)) ui.model.value = alias;
    }
    this.renderTokens(conversation);
  }

  renderTokens(conversation) {
    const ui = this.ui;
    if (!conversation || !conversation.tokenCount) {
      ui.tokens.textContent = "";
      ui.warning.hidden = true;
      return;
    }
    const fmt = new Intl.NumberFormat();
    const windowSize = conversation.contextWindow;
    ui.tokens.textContent = windowSize
      ? `${fmt.format(conversation.tokenCount)} / ${fmt.format(windowSize)} tokens`
      : `${fmt.format(conversation.tokenCount)} tokens`;
    ui.warning.hidden = !conversation.contextWarning;
  }

  renderModels(models) {
    const options = models.map((model) => {
      const option = el("option", "", model.label || model.alias);
      option.value = model.alias;
      if (model.alias === this.defaultModel) option.selected = true;
      return option;
    });
    this.ui.model.replaceChildren(...options);
    this.ui.model.disabled = options.length <= 1;
  }

  beginRename() {
    const ui = this.ui;
    if (!this.conversation) return;
    ui.renameInput.value = this.conversation.title || "";
    ui.renameForm.hidden = false;
    ui.title.hidden = true;
    ui.renameInput.focus();
    ui.renameInput.select();
  }

  endRename() {
    this.ui.renameForm.hidden = true;
    this.ui.title.hidden = false;
    this.ui.renameButton.focus();
  }
}
