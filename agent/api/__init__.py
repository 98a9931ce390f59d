"""The REST API (docs/protocol.md §9): `main.py` collects the routers in `routes/`, `deps.py`
holds the dependencies (`CurrentUser`, `ServicesDep`), `models.py` the bodies, `cursors.py` the
signed pagination cursors, `errors.py` what routes declare about errors, `limits.py` the
request-body limit. Routes stay thin and call `storage` functions.
"""
