"""The gate: one path for every call of a catalog tool, whoever asks (the graph's policy and
tools nodes for a chat turn, agent/chat/gated_calls.py for an MCP client): validate, the
sidecar with both tokens, the agent's own card rules, grants, then run once (Idempotency-Key,
fenced) with one audit record. How a card is asked stays with each caller (the graph's
`interrupt()`, an MCP call's elicitation or stored call); what is checked and how a call runs
is here, once.

    checks.py         Gate: an upstream tool not quarantined, the tool offered, its schema,
                      the sidecar, our own card rules (untrusted context, a fork after a
                      write), a grant for an approval
    execution.py      Execution: a judged call run once (catalog revision, Idempotency-Key,
                      fenced attempts) and its execution row
    audit_rows.py     CallAudit: where a caller's calls are recorded, with their channel
    policy_client.py  the sidecar's /v1/check and /v1/permissions (docs/protocol.md §6)
    policy_wire.py    the sidecar's own HTTP/1.1 client: kept connections, one write a request
    tool_runtime.py   one catalog tool against the ss-tools API (docs/protocol.md §7), each
                      attempt fenced by the run's epoch (agent/storage/fencing.py)
    service_token.py  our service JWT, from the operator's file or the ss-tools endpoint
    upstream_calls.py one call of another team's MCP tool (a catalog tool with `upstream`):
                      pins asked, sent once, unknown outcome on a write's timeout, results
                      text and JSON only, capped, untrusted
    upstream_client.py  a session to an upstream MCP server: the catalog's URL, our
                      credential, a byte cap, failures with a reason
    upstream_auth.py  our credential for an upstream (bearer, client credentials, a signed
                      JWT naming the caller), from the mounted Secret's files
    upstream_pins.py  UpstreamPins: each upstream's tools/list watched against the catalog's
                      pins; a drifted tool quarantined on every replica (allows, offered)
    upstream_served.py  what an upstream serves: its whole tools/list, the drifts from the
                      pins, its list_changed stream
    upstream_review.py  `agentchat mcp pin` drafts and `agentchat mcp check` diffs

What it may import: agent/README.md, "Module map" (tests/core/import_rules.py): the audit
trail, storage and the shared modules; never the graph, chat or an adapter.
"""
