"""Plain async functions behind the kopf handlers in agentchat.operator.main."""
