"""Plain async functions behind the kopf handlers in agentchat.operator.main.

    handle_startup_operator.py    kopf's settings and the shared clients
    handle_rotate_agentchat.py    publish the JWKS, rotate the ring, renew the service token
    handle_prune_agentchat.py     prune one AgentChat's checkpoints when due
"""
