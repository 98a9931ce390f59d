"""The catalog's example requests (`examples`): optional, per language, validated with errors
that name the file, the tool and the field, and used as embedding documents of their tool."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentchat.agent.selection.embeddings import tool_texts
from agentchat.catalog import load_catalog
from agentchat.errors import CatalogError
from agentchat.settings import PACKAGE_DATA

SHIPPED = PACKAGE_DATA / "catalog.yaml"
# The first example of deploy_dashboard in the shipped catalog, edited below.
DEPLOY_EXAMPLE = "        - выкати новую версию дашборда на прод\n"


def test_shipped_catalog_has_examples_in_both_languages() -> None:
    catalog = load_catalog(SHIPPED)
    for tool in catalog.tools:
        if tool.name == "show_capabilities":  # keywords only: it is not in the tool index
            continue
        assert tool.examples.ru and tool.examples.en, tool.name
        texts = tool_texts(tool)
        assert set(tool.examples.ru) | set(tool.examples.en) <= set(texts)


def test_examples_are_optional(tmp_path: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    start = text.index("    examples:\n", text.index("  - name: deploy_dashboard"))
    end = text.index("    args:\n", start)
    path = tmp_path / "catalog.yaml"
    path.write_text(text[:start] + text[end:], encoding="utf-8")
    deploy = load_catalog(path).get("deploy_dashboard")
    assert deploy is not None
    assert deploy.examples.ru == [] and deploy.examples.en == []
    assert len(tool_texts(deploy)) == 4  # descriptions and keywords only


@pytest.mark.parametrize(("replacement", "field"), [
    ('        - ""\n', "field examples.ru.0"),
    ("        - [not, a, string]\n", "field examples.ru.0"),
    (DEPLOY_EXAMPLE + "      de:\n        - Dashboard ausrollen\n", "field examples.de"),
])
def test_broken_examples_name_the_tool_and_field(tmp_path: Path, replacement: str,
                                                 field: str) -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    assert text.count(DEPLOY_EXAMPLE) == 1
    path = tmp_path / "catalog.yaml"
    path.write_text(text.replace(DEPLOY_EXAMPLE, replacement), encoding="utf-8")
    with pytest.raises(CatalogError) as e:
        load_catalog(path)
    assert str(path) in e.value.detail
    assert f"tool 'deploy_dashboard': {field}" in e.value.detail
