"""The agent's own tables: conversations, turns, messages, tool calls, cards, leases."""
