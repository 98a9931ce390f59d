"""Test support for AgentChat: never installed in a pod (the product's pyproject leaves it out).

Whole-system helpers (`stack`: sandbox, sidecar and agent as real processes; `raw_chat`, a lean
`/chat` client; `reliability`, replicas and `assert_consistent`), stand-ins that are real code
paths (`openai_stub`, an OpenAI-compatible model server; `kube_emulator`, the Kubernetes API
under kmock for kopf), the JWT attack list (`attacks`), and the policy's reference enforcer and
synthetic policies the compiled snapshot is held against. `make install` installs it editable
(`tests/testkit/pyproject.toml`), so tests and `bench/` import `testkit.*` like any package.
"""
