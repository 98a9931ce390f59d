/** What the panel shares with the messages it draws, through Svelte's context (set once by
 * AgentChatPanel.svelte, read by UserMessage.svelte and AssistantMessage.svelte): the model,
 * and which user message is being edited (one at a time: opening another edit closes the first).
 */

import { createContext } from "svelte";
import type { ChatModel } from "../model/chat.svelte.js";

export interface ChatContext {
  readonly model: ChatModel;
  /** The user message being edited (docs/protocol.md §4, "Branches") and its new text: a
   * `$state` object, so each message sees another one's edit open. */
  readonly editing: { id: string | null; text: string };
}

export const [getChat, setChat] = createContext<ChatContext>();
