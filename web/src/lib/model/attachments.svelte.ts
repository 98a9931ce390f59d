/** Files attached to the next message (docs/protocol.md §1): checked against the limits before
 * anything is sent, uploaded one by one through the upload route with progress, and a refusal
 * (the panel's own check, or the server's `{code, detail}`) kept beside the file with its why. */

import type { Words } from "../i18n.js";
import { type FileData, RestError, type Uploader } from "./types.js";

export interface Limits {
  maxFiles: number;
  maxFileBytes: number;
  maxTotalBytes: number;
}

/** docs/protocol.md §1's defaults; the page reads the agent's own from config.json. */
export const DEFAULT_LIMITS: Limits = { maxFiles: 5, maxFileBytes: 1 << 20, maxTotalBytes: 5 << 20 };

export interface Attachment {
  id: number;
  name: string;
  size: number;
  status: "uploading" | "ready" | "refused";
  /** 0…100 while uploading. */
  progress: number;
  reason: string | null;
  file: FileData | null;
}

export function formatBytes(n: number, units: string[]): string {
  if (n < 1024) return `${n} ${units[0]}`;
  if (n < 1024 * 1024) return `${Math.round(n / 1024)} ${units[1]}`;
  return `${Math.round((n / (1024 * 1024)) * 10) / 10} ${units[2]}`;
}

let nextId = 0;

export class AttachmentsModel {
  items = $state<Attachment[]>([]);
  readonly limits: Limits;
  #upload: Uploader | null;
  #words: Words;

  constructor(upload: Uploader | null, words: Words, limits: Limits = DEFAULT_LIMITS) {
    this.#upload = upload;
    this.#words = words;
    this.limits = limits;
  }

  get enabled(): boolean {
    return this.#upload !== null;
  }

  get uploading(): boolean {
    return this.items.some((a) => a.status === "uploading");
  }

  /** The files the next message carries. */
  get ready(): FileData[] {
    return this.items.flatMap((a) => (a.status === "ready" && a.file ? [a.file] : []));
  }

  /** The limits as the user reads them, before choosing a file. */
  get limitsText(): string {
    const u = this.#words.sizeUnits;
    return this.#words.limits(this.limits.maxFiles, formatBytes(this.limits.maxFileBytes, u), formatBytes(this.limits.maxTotalBytes, u));
  }

  add(files: Iterable<File>): void {
    const u = this.#words.sizeUnits;
    for (const f of files) {
      const kept = this.items.filter((a) => a.status !== "refused");
      const total = kept.reduce((s, a) => s + a.size, 0) + f.size;
      let reason: string | null = null;
      if (kept.length >= this.limits.maxFiles) reason = this.#words.tooMany(this.limits.maxFiles);
      else if (f.size > this.limits.maxFileBytes) reason = this.#words.tooBig(formatBytes(this.limits.maxFileBytes, u));
      else if (total > this.limits.maxTotalBytes) reason = this.#words.tooBigAll(formatBytes(this.limits.maxTotalBytes, u));
      this.items.push({ id: ++nextId, name: f.name, size: f.size, status: reason ? "refused" : "uploading", progress: 0, reason, file: null });
      const a = this.items[this.items.length - 1]!;
      if (!reason) void this.#send(a, f);
    }
  }

  remove(a: Attachment): void {
    this.items = this.items.filter((x) => x.id !== a.id);
  }

  /** After a send: the files went with the message. */
  clear(): void {
    this.items = [];
  }

  async #send(a: Attachment, f: File): Promise<void> {
    if (!this.#upload) return;
    try {
      const file = await this.#upload(f, (p) => { a.progress = Math.round(p * 100); });
      a.file = file;
      a.progress = 100;
      a.status = "ready";
    } catch (e) {
      a.status = "refused";
      a.reason = e instanceof RestError ? e.detail || e.code : e instanceof Error ? e.message : String(e);
    }
  }
}
