"""The shipped catalog's commented Superset section (agentchat/data/catalog.yaml, docs/
upstreams.md), turned on as a platform engineer would: the lines between `# BEGIN <block>` and
`# END <block>` uncommented in place. Blocks: "superset tools" (the reads), "superset
execute_sql" (off even then), "superset upstream" (the server).

    text = shipped_superset(["superset tools", "superset upstream"])
    catalog = parse_catalog(text.encode(), "catalog.yaml")
"""

from __future__ import annotations

import re

from agentchat.settings import PACKAGE_DATA

BLOCKS = ("superset tools", "superset execute_sql", "superset upstream")


def block(text: str, name: str) -> str:
    """One block, uncommented (a `#` alone is an empty line)."""
    m = re.search(rf"^# BEGIN {name}\n(.*?)^# END {name}\n", text, re.S | re.M)
    assert m is not None, f"no block {name!r}"
    return "".join(line[2:] if line.startswith("# ") else line[1:]
                   for line in m.group(1).splitlines(True))


def shipped_superset(blocks: tuple[str, ...] | list[str] = BLOCKS, text: str | None = None) -> str:
    """The catalog's text (default the shipped one) with `blocks` uncommented in place."""
    text = text if text is not None else (PACKAGE_DATA / "catalog.yaml").read_text()
    for name in blocks:
        whole = re.search(rf"^# BEGIN {name}\n.*?^# END {name}\n", text, re.S | re.M)
        assert whole is not None, f"no block {name!r}"
        text = text.replace(whole.group(0), block(text, name))
    return text
