"""The policy sidecar (policy/README.md): both JWTs, Casbin decisions with risk and
alternatives, and the platform team's tools. A decision's path through the package:

    app.py           the HTTP API (docs/protocol.md §6): tokens, then a decision
    engine.py        a snapshot's verdict plus the catalog's risk, card and alternatives
    snapshot.py      one loaded policy compiled, immutable, answering in microseconds
    reload.py        the serving snapshot and its safe hot reload
    rules.py         reading a policy folder: model, policy lines, shipped tests
    approvals.py     who must approve a carded call (`approvals.yaml`)
    cases.py         the policy tests a platform team ships with its policy
    decision_log.py  one JSON line per decision
    metrics.py       the sidecar's Prometheus metrics
    settings.py      PolicySettings (AGENTCHAT_POLICY_<NAME>)
    cli.py           `agentchat policy serve | test | explain | matrix | diff | replay`;
                     matrix.py, diff.py and replay.py behind the last three
"""
