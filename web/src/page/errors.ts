/** A REST failure in a page's language: the codes the page knows in its own words, else the
 * server's detail. Shared by the approvals pages and the call page. */

import { RestError } from "../lib/model/types.js";

export interface ErrorWords {
  errors: Record<string, string>;
  unreachable: string;
  failed: (detail: string) => string;
}

export function errorText(e: unknown, w: ErrorWords): string {
  if (e instanceof RestError) {
    if (e.unreachable) return w.unreachable;
    return w.errors[e.code] ?? w.failed(e.detail || e.code);
  }
  return w.failed(e instanceof Error ? e.message : String(e));
}
