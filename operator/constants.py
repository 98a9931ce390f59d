"""The API group, resource names, label keys, Secret data keys, condition types and the pruner lock.

The chart's helpers emit the same label keys; keep both in step.
"""

from __future__ import annotations

GROUP = "agentchat.sstools.io"
VERSION = "v1"
KIND = "AgentChat"
PLURAL = "agentchats"
API_VERSION = f"{GROUP}/{VERSION}"

# Labels on every object the operator writes.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "agentchat-operator"
LABEL_INSTANCE = f"{GROUP}/instance"
LABEL_PART = f"{GROUP}/part"
# The chart's release label on the AgentChat: an operator serves its own release's only.
LABEL_RELEASE = "app.kubernetes.io/instance"

# Data keys inside the Secrets and ConfigMap (the runtime contract; mounted as folders).
RING_KEY = "signing-keys.json"
JWKS_KEY = "jwks.json"
TOKEN_KEY = "token"
# Beside the token: the keys that seal the user token a live run keeps for its takeover
# (agent/storage/sealing.py), one a line, the sealing one first (resume_keys.py), and their
# stages (no key in it; not mounted by the pods).
RESUME_KEY = "resume-key"
RESUME_KEYS_KEY = "resume-keys.json"
# In the ring Secret, beside the ring: public keys recovered from the JWKS after the ring
# Secret went missing, each kept in the JWKS until its overlap ends.
RETAINED_KEY = "retained.json"

# Condition types in status.conditions.
READY = "Ready"
KEYS_ROTATED = "KeysRotated"
TOKEN_FRESH = "TokenFresh"
PRUNED = "Pruned"
SPEC_VALID = "SpecValid"
CONDITION_TYPES = (READY, KEYS_ROTATED, TOKEN_FRESH, PRUNED, SPEC_VALID)

# Advisory lock (namespace, key) held by the one pruner of a database; the namespace is
# agentchat.db's conversation namespace + 1 so the two never collide.
PRUNER_LOCK = (0x41430003, 1)
