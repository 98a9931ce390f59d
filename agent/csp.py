"""The Content-Security-Policy of the agent's two pages: the people's page (web/ at
/api/agent/ui/, agent/api/routes/ui.py) and the built-in Gradio page (agent/gradio/page_headers.py).

Both need only same-origin scripts, styles, images and connections. Inline <script>/<style>
blocks of a page's HTML are allowed by their sha256 only. Styles set from script through the
CSSOM (Svelte's style directives) are not inline styles for CSP; Gradio's page also writes
<style> elements at run time (its theme and component CSS), so that page passes
`inline_styles=True` ('unsafe-inline' for styles only: a style cannot run code, and with
`img-src 'self' data:` a `url()` cannot send data to another origin either).
"""

from __future__ import annotations

import base64
import hashlib
import re

CSP_BASE = ("default-src 'self'; script-src 'self'{scripts}; style-src 'self'{styles}; "
            "connect-src 'self'; img-src 'self' data:; font-src 'self' data:; "
            "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# Applied to our own pages' HTML (the build's index.html, Gradio's page template), never to
# text a user or a model wrote.
_INLINE = re.compile(r"<(script|style)\b([^>]*)>(.*?)</\1>", re.S | re.I)


def content_security_policy(html: str, *, inline_styles: bool = False) -> str:
    """The CSP for a page: 'self', plus a sha256 source for each inline block of its HTML."""
    hashes: dict[str, list[str]] = {"script": [], "style": []}
    for tag, attrs, body in _INLINE.findall(html):
        if tag.lower() == "script" and re.search(r"\bsrc\s*=", attrs):
            continue
        if body.strip():
            digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
            hashes[tag.lower()].append(f" 'sha256-{digest}'")
    styles = " 'unsafe-inline'" if inline_styles else "".join(hashes["style"])
    return CSP_BASE.format(scripts="".join(hashes["script"]), styles=styles)
