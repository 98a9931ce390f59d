"""The stand-in ss-tools API (sandbox/README.md), for the demo and the tests only. A request's
path through the package:

    app.py             create_app: one endpoint per catalog tool, and the sandbox's own routes
    gateway.py         the pipeline every tool endpoint runs (tokens, arguments, RBAC, faults,
                       idempotency, the operation, the audit record)
    access.py          who is calling and what they may do: both JWTs, then ss-tools' RBAC
    arguments.py       a tool's arguments from the request, checked against its schema
    idempotency.py     Idempotency-Key: same key, same result, executed once
    faults.py          fault injection (sandbox mode only)
    context.py         what an operation gets and how it fails
    ops_dashboards.py  dashboard operations; ops_platform.py: platform operations
    world.py           the mutable state; data.py: its seeded data; search.py: word matching
    audit.py           the audit log of requests
    exchange.py        the user tokens' issuer's token exchange (RFC 8693), dev only
    settings.py        SandboxSettings (AGENTCHAT_SANDBOX_<NAME>)
    cli.py             `agentchat sandbox`
"""
