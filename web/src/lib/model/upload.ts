/** The upload route (docs/protocol.md §1: `…/gradio_api/upload`, multipart field `files`, the
 * user token in `Authorization`) with upload progress, which `fetch` cannot report: XHR. */

import { type FileData, RestError, UNREACHABLE, type Uploader } from "./types.js";

export function createUploader(gradioUrl: string, getToken: () => Promise<string | null>): Uploader {
  const url = `${gradioUrl.replace(/\/+$/, "")}/gradio_api/upload`;
  return async (file, progress) => {
    const token = await getToken();
    return new Promise<FileData>((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", url);
      if (token) xhr.setRequestHeader("Authorization", `Bearer ${token}`);
      xhr.upload.onprogress = (e) => { if (e.lengthComputable) progress(e.loaded / e.total); };
      xhr.onerror = () => reject(new RestError(0, UNREACHABLE, "the upload did not reach the agent"));
      xhr.onload = () => {
        let body: unknown = null;
        try {
          body = JSON.parse(xhr.responseText);
        } catch {
          // not JSON: a proxy answered
        }
        const paths = Array.isArray(body) ? body : null;
        if (xhr.status >= 200 && xhr.status < 300 && typeof paths?.[0] === "string") {
          resolve({ path: paths[0], orig_name: file.name, size: file.size, mime_type: file.type,
                    meta: { _type: "gradio.FileData" } });
          return;
        }
        const err = body as { code?: unknown; detail?: unknown } | null;
        reject(new RestError(xhr.status, typeof err?.code === "string" ? err.code : "INTERNAL",
                             typeof err?.detail === "string" ? err.detail : `HTTP ${xhr.status}`));
      };
      const form = new FormData();
      form.append("files", file, file.name);
      xhr.send(form);
    });
  };
}
