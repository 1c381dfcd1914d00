// jxai chat page: files in the composer and in sent messages (docs/attachments.md "The page").
//
// Files come by drag-and-drop onto the composer, by paste (a screenshot from the clipboard)
// and by the file picker. Each is uploaded at once over HTTP (POST /ai/attachments, multipart,
// the page's CSRF token) with XMLHttpRequest, whose upload progress the chip's bar shows; the
// send frame names the ids of the finished ones. An image for a model that takes no images
// (its `input` in the model list) is refused here, before any upload.

import { el } from "./render.js";

const UPLOAD_URL = "/ai/attachments";

/** `1234` → "1.2 KB" (powers of 1024, one decimal below 10). */
export function formatSize(bytes) {
  const units = ["B", "KB", "MB", "GB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 || value >= 10 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`;
}

function problemText(xhr) {
  try {
    const body = JSON.parse(xhr.responseText);
    return body.detail || body.title || `Upload failed (${xhr.status}).`;
  } catch {
    return `Upload failed (${xhr.status || "network error"}).`;
  }
}

/** The files of a sent message, under its text: a thumbnail for an image, a link for a document. */
export function showAttachments(node, attachments) {
  const old = node.querySelector(":scope > .message-attachments");
  if (old) old.remove();
  if (!attachments || !attachments.length) return;
  const list = el("div", "message-attachments");
  for (const attachment of attachments) {
    const link = el("a", "message-attachment", null, "message-attachment");
    link.href = attachment.url;
    link.target = "_blank";
    link.rel = "noopener";
    link.title = `${attachment.name} (${formatSize(attachment.size)})`;
    if (attachment.width != null) {
      const img = el("img", "attachment-thumbnail");
      img.src = attachment.url;
      img.alt = attachment.name;
      link.append(img);
    } else {
      link.append(el("span", "attachment-name", `${attachment.name} · ${formatSize(attachment.size)}`));
    }
    list.append(link);
  }
  const body = node.querySelector(":scope > .message-body");
  if (body) body.after(list);
  else node.append(list);
}

/** The composer's pending files: chips, uploads, the ids a send names. */
export class AttachmentTray {
  /**
   * @param {{form: Element, composer: Element, input: HTMLInputElement, picker: Element, tray: Element,
   *          csrf: string}} ui
   * @param {{takesImages: function(): boolean, modelName: function(): string, onError: function(string)}} hooks
   */
  constructor(ui, hooks) {
    this.ui = ui;
    this.hooks = hooks;
    this.items = [];   // {chip, xhr, id, file}
    ui.picker.addEventListener("click", () => ui.input.click());
    ui.input.addEventListener("change", () => {
      this.addFiles(ui.input.files);
      ui.input.value = "";
    });
    ui.form.addEventListener("dragover", (event) => {
      if (event.dataTransfer && Array.from(event.dataTransfer.types).includes("Files")) {
        event.preventDefault();
        ui.form.classList.add("dropping");
      }
    });
    ui.form.addEventListener("dragleave", () => ui.form.classList.remove("dropping"));
    ui.form.addEventListener("drop", (event) => {
      ui.form.classList.remove("dropping");
      if (event.dataTransfer && event.dataTransfer.files.length) {
        event.preventDefault();
        this.addFiles(event.dataTransfer.files);
      }
    });
    ui.composer.addEventListener("paste", (event) => {
      const files = event.clipboardData ? Array.from(event.clipboardData.files) : [];
      if (files.length) {
        event.preventDefault();
        this.addFiles(files);
      }
    });
  }

  addFiles(files) {
    for (const file of Array.from(files)) {
      if (file.type.startsWith("image/") && !this.hooks.takesImages()) {
        this.hooks.onError(`${this.hooks.modelName()} takes text only, not images; pick a model that takes images.`);
        continue;
      }
      this.upload(file);
    }
  }

  upload(file) {
    const chip = el("div", "attachment-chip", null, "attachment-chip");
    const progress = el("progress", "attachment-progress", null, "attachment-progress");
    progress.max = 1;
    progress.value = 0;
    const remove = el("button", "attachment-remove", "×", "attachment-remove");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove ${file.name}`);
    chip.append(el("span", "attachment-name", file.name), el("span", "attachment-size", formatSize(file.size)),
      progress, remove);
    if (file.type.startsWith("image/")) {
      const thumbnail = el("img", "attachment-thumbnail");
      thumbnail.alt = "";
      const reader = new FileReader();
      reader.addEventListener("load", () => { thumbnail.src = reader.result; });
      reader.readAsDataURL(file);
      chip.prepend(thumbnail);
    }
    const item = { chip, file, id: null, xhr: new XMLHttpRequest() };
    this.items.push(item);
    this.ui.tray.append(chip);
    this.ui.tray.hidden = false;
    remove.addEventListener("click", () => this.remove(item));

    const { xhr } = item;
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) progress.value = event.loaded / event.total;
    });
    xhr.addEventListener("load", () => {
      if (xhr.status === 201) {
        item.id = JSON.parse(xhr.responseText).id;
        progress.value = 1;
        chip.classList.add("uploaded");
      } else {
        this.remove(item);
        this.hooks.onError(`${file.name}: ${problemText(xhr)}`);
      }
    });
    xhr.addEventListener("error", () => {
      this.remove(item);
      this.hooks.onError(`${file.name}: the upload failed; try again.`);
    });
    const form = new FormData();
    form.append("file", file, file.name);
    xhr.open("POST", UPLOAD_URL);
    xhr.setRequestHeader("X-CSRFToken", this.ui.csrf);
    xhr.send(form);
  }

  remove(item) {
    if (item.id === null) item.xhr.abort();
    item.chip.remove();
    this.items = this.items.filter((other) => other !== item);
    this.ui.tray.hidden = this.items.length === 0;
  }

  /** True while a file is still uploading (the send waits for it). */
  busy() {
    return this.items.some((item) => item.id === null);
  }

  /** The uploaded files' ids, in the order they were added. */
  ids() {
    return this.items.map((item) => item.id).filter((id) => id !== null);
  }

  /** The message was sent: the chips go (the message shows its files once saved). Returns
   *  them, for `putBack` should the server refuse the send. */
  take() {
    const taken = this.items;
    for (const item of taken) item.chip.remove();
    this.items = [];
    this.ui.tray.hidden = true;
    return taken;
  }

  /** A refused send: its files return to the composer, still uploaded (nothing is lost). */
  putBack(taken) {
    for (const item of taken) {
      this.items.push(item);
      this.ui.tray.append(item.chip);
    }
    this.ui.tray.hidden = this.items.length === 0;
  }
}
