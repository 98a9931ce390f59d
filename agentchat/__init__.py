"""What every component shares (docs/architecture.md, "Components"); a component imports these,
never another component (agent/README.md, "Module map", is the rule as a table).

    settings.py        SharedSettings and the naming convention of every AGENTCHAT_ variable
    db.py              where PostgreSQL is, the pool, migrations run, the per-conversation lock
    migrations.py      our tables, an append-only list of migrations
    errors.py          the error codes of the wire contract and the one exception tree
    http_errors.py     the `{code, detail}` HTTP error body of every component's app
    asgi.py            request bodies: the body limit, reading and replaying a body
    identity.py        JWT verification (RFC 8725) and the dev issuer
    verified_tokens.py verified tokens cached by their digest
    keys.py            the service-token signing keys in three stages, the JWKS
    catalog.py         the declarative tool catalog; catalog_source.py: the file, reloaded live
    catalog_upstreams.py  the catalog's other MCP servers (`upstreams`) and a tool's pin
    tool_request.py    a tool call's arguments validated into exactly one ss-tools request
    patterns.py        the catalog's regular expressions in linear time (RE2)
    digest.py          the digest of a call's arguments, one function for every component
    words.py           words for people: the turn's language, safe names, the server's texts
    http_clients.py    outbound HTTP clients that keep no cookie; http_pool.py: their pool
    telemetry.py       OpenTelemetry, off unless OTEL_* is set
    heap.py            the garbage collector tuned for a replica, and the idle trim
    cli.py             the `agentchat` command: loads each component's cli.py by name
    demo.py            `agentchat demo`: every component on this machine
"""
