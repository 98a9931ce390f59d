"""The Gradio adapter: everything Gradio-specific, beside `api/` on the top floor. Both call the
chat domain through its door (agent/chat/facade.py: `submit`, `join`).

    mount.py         the apps mounted on the FastAPI app, and the guards their routes need
    blocks.py        the Blocks: `/chat` (a gr.api endpoint) and the built-in page's app
    chat_api.py      the `/chat` function's body: parse, authenticate, submit or join, stream
    chat_queue.py    `/chat`'s queue/join, queue/data and cancel, in Gradio's sse_v3 wire
    inputs.py        the seven inputs and their limits (docs/protocol.md §1) -> ChatRequest
    page.py          the built-in page; page_text.py: everything others wrote, as plain text
    page_headers.py  the page's redirect and Content-Security-Policy (middlewares)
    file_guard.py    Gradio's upload, file and queue routes: uploads only, their owner, quotas
    upload_quota.py  the upload route's quotas, counted as the body streams
    session_guard.py Gradio's own routes act on the caller's sessions only

What it may import: agent/README.md, "Module map" (tests/core/import_rules.py); never api/.
"""
