"""The catalog's words (issue 18): titles and card prompt templates in Russian and English,
checked at load; the prompt built from them; names quoted and cut; the turn's language; the
texts of `error` events.

Validation errors are produced by loading broken copies of the shipped catalog file, as an
operator's edit would break it; builders and parsers are driven by hypothesis.
"""

from __future__ import annotations

import re
import string
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agentchat.catalog import OBJECT_KINDS, load_catalog
from agentchat.errors import CatalogError, ErrorCode
from agentchat.settings import PACKAGE_DATA
from agentchat.words import (
    NAME_CHARS,
    clean_text,
    error_text,
    object_label,
    safe_name,
    turn_language,
)
from testkit.language import language_problems

SHIPPED = PACKAGE_DATA / "catalog.yaml"
CATALOG = load_catalog(SHIPPED)


def broken(tmp_path: Path, tool: str, change: Any) -> str:
    """The shipped catalog with one tool changed by `change(tool_dict)`; the load's error."""
    data = yaml.safe_load(SHIPPED.read_text())
    change(next(t for t in data["tools"] if t["name"] == tool))
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    with pytest.raises(CatalogError) as err:
        load_catalog(path)
    return str(err.value)


def test_a_missing_title_names_the_tool_and_field(tmp_path: Path) -> None:
    msg = broken(tmp_path, "deploy_dashboard", lambda t: t.pop("title"))
    assert "tool 'deploy_dashboard': field title: Field required" in msg, msg


@pytest.mark.parametrize(("field", "lang"), [("title", "en"), ("title", "ru"), ("prompt", "en"),
                                             ("prompt", "ru")])
def test_a_missing_language_names_the_tool_and_field(tmp_path: Path, field: str,
                                                     lang: str) -> None:
    msg = broken(tmp_path, "search_datasets", lambda t: t[field].pop(lang))
    assert f"tool 'search_datasets': field {field}.{lang}: Field required" in msg, msg


@pytest.mark.parametrize(("template", "why"), [
    ("Задеплоить {dashbord} в {env}?", "placeholder {dashbord} is not"),    # a typo
    ("Задеплоить {dashboard} версии {version}?", "placeholder {version} is not"),  # optional
    ("Задеплоить {dashboard} в {env!r}?", "may not carry a format or conversion"),
    ("Задеплоить {dashboard:>10} в {env}?", "may not carry a format or conversion"),
    ("Задеплоить {dashboard} в {env?", "field prompt.ru"),                   # unclosed
    ("Задеплоить {0} в {env}?", "is not a plain name"),
    ("Задеплоить {dashboard.title} в {env}?", "is not a plain name"),
])
def test_a_bad_placeholder_names_the_tool_field_and_placeholder(tmp_path: Path, template: str,
                                                                why: str) -> None:
    msg = broken(tmp_path, "deploy_dashboard", lambda t: t["prompt"].update(ru=template))
    assert "tool 'deploy_dashboard': field prompt.ru:" in msg and why in msg, msg


def test_env_and_objects_only_where_the_tool_has_them(tmp_path: Path) -> None:
    # get_task_status has no environment and no object id
    msg = broken(tmp_path, "get_task_status", lambda t: t["prompt"].update(en="{env} {dashboard}?"))
    assert "tool 'get_task_status': field prompt.en: placeholder {env} is not" in msg, msg
    assert "(may use: task_id)" in msg, msg


# -- the shipped catalog's words -----------------------------------------------------------

def test_every_tool_has_its_words_in_each_language() -> None:
    for tool in CATALOG.tools:
        for lang in ("ru", "en"):
            assert not language_problems(tool.title_in(lang) + " " + tool.description_in(lang)
                                         + (" the" if lang == "en" else ""), lang), tool.name
            assert ":" not in tool.title_in(lang), "the model's description starts 'title: '"
        if not re.search("[а-яё]", tool.title.ru, re.I) or re.search("[а-яё]", tool.title.en, re.I):
            pytest.fail(f"{tool.name}: a title in the wrong script")
        for alt in tool.alternatives:
            assert re.search("[а-яё]", alt.prompt.ru, re.I) and not re.search(
                "[а-яё]", alt.prompt.en, re.I), (tool.name, alt)


def _argument(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if schema.get("type") == "integer":
        return st.integers(min_value=schema.get("minimum", 1), max_value=10**9)
    if schema.get("pattern"):
        return st.from_regex(schema["pattern"], fullmatch=True)
    return st.text(max_size=schema.get("maxLength", 200))


@st.composite
def calls(draw: st.DrawFn) -> tuple[Any, dict[str, Any], dict[str, str]]:
    tool = draw(st.sampled_from(CATALOG.tools))
    props = tool.args.get("properties", {})
    args = {name: draw(_argument(props[name])) for name in props
            if name in tool.args.get("required", []) or draw(st.booleans())}
    names = draw(st.dictionaries(st.sampled_from(sorted(OBJECT_KINDS)), st.text(max_size=600),
                                 max_size=3))
    return tool, args, names


@settings(max_examples=300, deadline=None)
@given(call=calls(), lang=st.sampled_from(["ru", "en"]))
def test_a_card_prompt_is_the_template_with_the_arguments_and_quoted_names(
        call: tuple[Any, dict[str, Any], dict[str, str]], lang: str) -> None:
    tool, args, names = call
    prompt = tool.card_prompt(args, lang, names)  # type: ignore[arg-type]
    template = tool.prompt.ru if lang == "ru" else tool.prompt.en
    # The template's own words are all there, in order, around the filled placeholders.
    literal = [text for text, *_ in string.Formatter().parse(template) if text]
    at = 0
    for piece in literal:
        found = prompt.find(piece, at)
        assert found >= 0, (piece, prompt)
        at = found + len(piece)
    for kind in OBJECT_KINDS:
        if "{" + kind + "}" in template and clean_text(names.get(kind, "")):
            quoted = re.findall(r"«([^«»]*)»|“([^“”]*)”", prompt)
            assert quoted, prompt
    assert not any(unicodedata.category(c) in ("Cc", "Cf") for c in prompt), repr(prompt)


# -- names, labels, the turn's language ----------------------------------------------------

@given(st.text(max_size=2000), st.sampled_from(["ru", "en"]))
def test_a_safe_name_is_quoted_clean_and_cut(raw: str, lang: str) -> None:
    name = safe_name(raw, lang)  # type: ignore[arg-type]
    opening, closing = ("«", "»") if lang == "ru" else ("“", "”")
    assert name[0] == opening and name[-1] == closing
    inner = name[1:-1]
    assert len(inner) <= NAME_CHARS
    assert not set(inner) & {"«", "»", "“", "”", '"'}, "a name cannot close its own quotes"
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp")
                   for c in inner), repr(inner)
    assert inner == inner.strip() and "  " not in inner


def test_a_label_is_the_name_with_its_id_or_the_id() -> None:
    assert object_label(42, "Отчёт", "ru") == "«Отчёт» (№42)"
    assert object_label(42, "Report", "en") == "“Report” (#42)"
    assert object_label(42, None, "ru") == "№42" and object_label(42, " \u202e ", "en") == "#42"


@given(st.text(alphabet="абвгдеёжзийклмнопрстуфхцчшщъыьэюя ", min_size=1).filter(str.strip),
       st.lists(st.sampled_from(["ss-dev", "prod", "ss-stage", "42", "task-abc"]), max_size=4))
def test_russian_words_make_a_russian_turn_whatever_ids_they_carry(words: str,
                                                                  ids: list[str]) -> None:
    assert turn_language(" ".join([words, *ids])) == "ru"


@given(st.lists(st.sampled_from(["deploy", "the", "dashboard", "find", "health", "of", "to"]),
                min_size=1),
       st.lists(st.sampled_from(["ss-dev", "prod", "42", "task-seed-1"]), max_size=4))
def test_english_words_make_an_english_turn(words: list[str], ids: list[str]) -> None:
    assert turn_language(" ".join([*words, *ids])) == "en"


def test_the_main_language_of_a_mixed_message_wins() -> None:
    assert turn_language("Найди dashboards про энергопотребление") == "ru"
    assert turn_language("please deploy the new version of дашборд 42 to prod") == "en"
    assert turn_language("42 prod") == "ru" and turn_language("42", default="en") == "en"


# -- error texts ---------------------------------------------------------------------------

@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_has_words_in_both_languages(code: ErrorCode) -> None:
    content, detail = error_text(str(code), "a turn is already running", "ru")
    assert content == f"Ошибка: {detail}"
    assert not language_problems(detail, "ru"), (code, detail)
    assert "turn" not in content, "the server's English detail stays out of a Russian error"
    content, detail = error_text(str(code), "a turn is already running", "en")
    assert (content, detail) == ("Error: a turn is already running", "a turn is already running")
    content, detail = error_text(str(code), "", "en")
    assert not language_problems(detail, "en"), (code, detail)
    assert content == f"Error: {detail}"
