"""Nothing crosses from one user or site to another, from outside: real sandbox, sidecar,
agent and PostgreSQL.

- **Cookies** (docs/protocol.md §7). The sandbox, like ss-tools' Flask, sets a session cookie
  for its user on every answer and records the `Cookie` each call carries: after alice's
  turn called it, bob's turn through the same agent (one shared HTTP client) carries none.
- **Cross-site writes** (docs/protocol.md §9). A browser's request from another site to a
  route that changes something (create, delete, restore, rename, append, branch, cancel,
  revoke) is 403 `FORBIDDEN` and changes nothing; same-origin, an allowed origin, and a
  client that sends neither `Origin` nor `Sec-Fetch-Site` (curl, the ss-tools backend) pass.
"""

from __future__ import annotations

import httpx

from testkit.reliability import say
from testkit.stack import Stack


def test_a_cookie_ss_tools_sets_for_alice_never_goes_out_on_bobs_call(stack: Stack) -> None:
    assert stack.sandbox is not None
    # The sandbox does set one, for the caller, on a tool's answer.
    direct = httpx.get(stack.sandbox.url + "/api/dashboards",
                       params={"env_id": "ss-dev", "query": "энерго"}, timeout=10,
                       headers={"Authorization": f"Bearer {stack.service_token()}",
                                "X-User-JWT": stack.token("alice")})
    assert direct.status_code == 200, direct.text
    assert direct.cookies["session"].startswith("alice.")
    stack.reset_sandbox()

    for user in ("alice", "bob", "alice"):
        out = say(stack.agent, stack.token(user), "найди дашборды про энергопотребление в ss-dev",
                  timeout=60)
        assert out.kind == "final", out.types()
    calls = stack.audit(operation="search_dashboards")
    assert [a["user_actor"] for a in calls] == ["alice", "bob", "alice"], calls
    assert [a["cookie"] for a in calls] == [None, None, None], calls
