/** The call page's words (docs/protocol.md §12), Russian and English. Server text (the card's
 * prompt) is shown as sent. */

import type { Lang } from "../../lib/i18n.js";
import type { CallState } from "./api.js";

const ru = {
  title: "Запрос MCP-клиента",
  backToChat: "К чату",
  loading: "Загрузка…",
  intro: "Ваш MCP-клиент (например, Claude Code или Cursor) просит выполнить действие. Оно выполнится, только если вы подтвердите его здесь.",
  tool: "Инструмент",
  environment: "Окружение",
  status: "Статус",
  created: "Создан",
  expires: "Истекает",
  prompt: "Что будет сделано",
  state: { pending: "ждёт вашего ответа", running: "выполняется", done: "выполнен", denied: "отклонён",
           expired: "истёк", failed: "не удался" } as Record<CallState, string>,
  confirm: "Подтвердить",
  deny: "Отклонить",
  sending: "Отправка…",
  approval: "Этот запрос должен одобрить другой человек; вы можете только отозвать его.",
  toApproval: "Страница одобрения",
  result: "Результат",
  closed: "На этот запрос уже нельзя ответить.",
  errors: {
    FORBIDDEN: "Этот запрос может одобрить только другой человек.",
    STALE_CONFIRMATION: "Аргументы запроса изменились: обновите страницу и проверьте их снова.",
    NO_PENDING_CONFIRMATION: "На запрос уже ответили, или он истёк.",
    NOT_FOUND: "Такого запроса нет, или он не ваш.",
    UNAUTHORIZED: "Войдите: сессии нет или она истекла.",
    RATE_LIMITED: "Слишком много запросов: попробуйте чуть позже.",
  } as Record<string, string>,
  unreachable: "Агент недоступен.",
  failed: (d: string) => `Ошибка: ${d}`,
  retry: "Повторить",
};

export type CallWords = typeof ru;

const en: CallWords = {
  title: "A request from your MCP client",
  backToChat: "Back to the chat",
  loading: "Loading…",
  intro: "Your MCP client (Claude Code or Cursor, say) asks to run an action. It runs only if you confirm it here.",
  tool: "Tool",
  environment: "Environment",
  status: "Status",
  created: "Created",
  expires: "Expires",
  prompt: "What will be done",
  state: { pending: "waiting for your answer", running: "running", done: "done", denied: "denied",
           expired: "expired", failed: "failed" },
  confirm: "Confirm",
  deny: "Deny",
  sending: "Sending…",
  approval: "Someone else must approve this request; you may only withdraw it.",
  toApproval: "The approval's page",
  result: "Result",
  closed: "This request can no longer be answered.",
  errors: {
    FORBIDDEN: "Only someone else may approve this request.",
    STALE_CONFIRMATION: "The request's arguments changed: reload the page and check them again.",
    NO_PENDING_CONFIRMATION: "The request was already answered, or it expired.",
    NOT_FOUND: "No such request, or it is not yours.",
    UNAUTHORIZED: "Sign in: no session, or it expired.",
    RATE_LIMITED: "Too many requests: try again in a moment.",
  },
  unreachable: "The agent cannot be reached.",
  failed: (d) => `Failed: ${d}`,
  retry: "Retry",
};

export const CALL_WORDS: Record<Lang, CallWords> = { ru, en };
