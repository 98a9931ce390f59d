"""The offline model's answers: tool results told like a colleague would, in the turn's language.

Every sentence is in one language; results are summarised with counts, titles, ids and
environments; a list shows up to `LIST_ITEMS` items and says how many more; a queued task
says what was queued and how to follow it; a denial by the user is the user's choice; a
permission denial offers the alternatives; failures are explained without raw JSON or the
server's English. Tools are named by their titles (`titles`: name -> title, from the tool
descriptions the model was given), never by their machine names; object names are quoted and
cut (agentchat.words.safe_name) whatever they say.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage

from agentchat.agent.graph.offline.said import Said, capitalized
from agentchat.agent.graph.offline.summaries import (
    SUMMARIES,
    generic_list,
    generic_object,
    names_of,
)
from agentchat.words import clean_text

_HTTP = re.compile(r"^Error (\d{3})\b")
_TIMEOUT = re.compile(r"^timed out after ([\d.]+) s")


def compose(results: Sequence[ToolMessage], tools_by_call: Mapping[str, str],
            said: Said) -> str:
    parts = [summarize(r, tools_by_call.get(r.tool_call_id) or r.name, said) for r in results]
    return "\n".join(p for p in parts if p) or said.t("Готово.", "Done.")


def summarize(result: ToolMessage, tool: str | None, said: Said) -> str:
    content = str(result.content)
    try:
        data = json.loads(content)
    except ValueError:
        return _not_done(content, tool, said)
    if isinstance(data, dict) and data.get("permission_denied") is True:
        return _permission_denied(data, tool, said)
    if result.status == "error" or not isinstance(data, dict):
        return _not_done(content, tool, said)
    summary = SUMMARIES.get(tool or "")
    if summary is not None:
        return summary(data, said)
    items = data.get("items")
    if not isinstance(items, list) and ("count" in data or "total_count" in data):
        # A listing under another team's name for it ("dashboards", "charts").
        items = next((v for v in data.values() if isinstance(v, list)
                      and all(isinstance(i, dict) for i in v)), None)
    if isinstance(items, list):
        return generic_list(items, tool, said)
    if names_of(data):
        return generic_object(data, tool, said)
    return said.t(f"Готово: действие {said.title(tool)} выполнено.",
                  f"Done: {said.title(tool)}.")


# -- not done --------------------------------------------------------------------------------

def _not_done(text: str, tool: str | None, said: Said) -> str:
    what = said.title(tool)
    act = said.t(f"действие {what}", what)  # «Поиск дашбордов» is a title: "действие «…»"
    if text.startswith("not run: the user denied it"):
        return said.t(f"Хорошо, {act} не выполняю: вы его отклонили.",
                      f"OK, I did not run {what}: you declined it.")
    if text.startswith("not run: the confirmation expired"):
        return said.t(f"Время на подтверждение истекло, поэтому {act} не выполнено. Если "
                      "это ещё нужно, повторите запрос.",
                      f"The confirmation expired, so {what} did not run. If you still need "
                      "it, send the request again.")
    if text.startswith("not run: the ss-tools API refused"):
        return said.t(
            f"{capitalized(act)} не выполнено: ss-tools отказал в предыдущем действии.",
            f"{capitalized(what)} did not run: ss-tools refused the action before it.")
    if text.startswith("not run:"):
        return said.t(
            f"{capitalized(act)} не выполнено: запрос к нему составлен неверно, в ss-tools "
            "ничего не отправлено. Уточните, что нужно сделать.",
            f"{capitalized(what)} did not run: the request for it was malformed, nothing "
            "was sent to ss-tools. Tell me more precisely what to do.")
    if text.startswith("cancelled"):
        return said.t(f"{capitalized(act)} остановлено по вашей просьбе.",
                      f"{capitalized(what)} was stopped at your request.")
    m = _TIMEOUT.match(text)
    if m:
        return said.t(f"На {act} ss-tools не ответил за {m.group(1)} с. Можно попробовать "
                      "ещё раз.",
                      f"ss-tools did not answer {what} within {m.group(1)} s. You can try "
                      "again.")
    m = _HTTP.match(text)
    if m:
        return _http_failure(int(m.group(1)), act, what, said)
    if text.startswith("connection error"):
        return said.t(f"Не удалось выполнить {act}: ss-tools не отвечает. Попробуйте чуть "
                      "позже.",
                      f"{capitalized(what)} failed: ss-tools does not answer. Try again shortly.")
    return said.t(f"Не удалось выполнить {act}: ss-tools вернул непонятный ответ.",
                  f"{capitalized(what)} failed: ss-tools returned an answer I cannot read.")


def _http_failure(status: int, act: str, what: str, said: Said) -> str:
    if status == 404:
        return said.t(f"Не нашёл, к чему применить {act}: такого объекта нет (или он вам не "
                      "виден). Проверьте номер и окружение.",
                      f"{capitalized(what)}: there is no such object (or you cannot see it). Check "
                      "the number and the environment.")
    if status in (400, 409, 422):
        return said.t(f"{capitalized(act)} не выполнено: ss-tools отклонил запрос (код {status}). "
                      "Проверьте номер и окружение.",
                      f"{capitalized(what)} did not run: ss-tools rejected the request (code "
                      f"{status}). Check the number and the environment.")
    if status in (401, 403):
        return said.t(f"{capitalized(act)} не выполнено: ss-tools не дал доступа (код {status}).",
                      f"{capitalized(what)} did not run: ss-tools denied access (code {status}).")
    return said.t(f"Не удалось выполнить {act}: ss-tools сейчас недоступен (код {status}). "
                  "Попробуйте ещё раз чуть позже.",
                  f"{capitalized(what)} failed: ss-tools is unavailable right now (code {status}). "
                  "Try again shortly.")


def _permission_denied(data: Mapping[str, Any], tool: str | None, said: Said) -> str:
    role = clean_text(data.get("required_role") or "")[:40]
    alts = [clean_text(a.get("prompt"))[:120] for a in data.get("alternatives") or []
            if isinstance(a, dict) and a.get("prompt")]
    need = said.t(f": нужна роль {role}", f": it needs the {role} role") if role else ""
    head = said.t(f"У вас нет прав на {said.title(tool)}{need}.",
                  f"You may not run {said.title(tool)}{need}.")
    if not alts:
        return head
    offers = "\n".join(f"- {a}" for a in alts)
    return head + said.t(f" Вместо этого могу:\n{offers}\nСкажите, что из этого сделать.",
                         f" Instead I can:\n{offers}\nTell me which of these to do.")


