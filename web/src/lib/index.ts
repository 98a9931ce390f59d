// @agentchat/panel: the panel for a host app, and the model for hosts that draw their own.
export { default as AgentChatPanel } from "./AgentChatPanel.svelte";
export { ChatModel, type ModelOptions } from "./model/chat.svelte.js";
export { ConversationsModel } from "./model/conversations.svelte.js";
export { createRest, type RestOptions } from "./model/rest.js";
export { createGradioTransport, examplesFrom, type GradioOptions } from "./model/transport.js";
export type * from "./model/types.js";
export { RestError } from "./model/types.js";
export { browserLang, WORDS, type Lang, type Words } from "./i18n.js";
export { defaultTabId, sessionRuns, urls } from "./urls.js";
