"""The AgentChat operator: signing keys, the service token and checkpoint pruning (kopf)."""
