"""The REST API (docs/protocol.md §9). A request's path through the package:

    main.py          collects the routers in `routes/`, one module per resource
    routes/*.py      a router each (prefix, tags, and for the REST resources the bearer
                     scheme, the cross-site check and `RestRoute`, set once on the router)
    deps.py          narrow `Annotated` dependencies: `Settings`, `DbPool`, `ChatDoor`,
                     `ApprovalsDep`, `UserToken` (the bearer verified once), `AdminUser`, ...
    agentchat.agent.chat   the door the routes call; they import nothing behind it

`models.py` holds the bodies, `cursors.py` the opaque pagination cursors, `error_docs.py` what
routes declare about errors (and `RestRoute`, FastAPI's own errors in our body).
"""
