"""pycasbin's own `enforce()` over the same policy: the reference the snapshot is tested against.

Slow (milliseconds a check at 2,000 lines) and not safe to share between threads while a
check runs, so it never answers requests: tests and the benchmark compare it with the
snapshot. The user's roles reach Casbin the way a user would: a request subject linked to the
roles that apply, added before the check and removed after, so no user id is ever kept in the
enforcer.

In an environment's domain the roles that apply are the ones held everywhere or in that
environment, and the answer is one `enforce(subject, env, obj)`. In domain `*` (an env-less
call) the answer is, with H = every held role, U = the ones held everywhere, S = the ones held
as `role@env`, and `explicit` a second enforcer over the same model, `g` and `g2` but only
the explicit env-less allow lines (`p, role, *, <tool name>, allow`)::

    enforce(H, *, obj) and (enforce(U, *, obj) or explicit.enforce(S, *, obj))

Writing A(X)/D(X) for "an allow/deny line at `*` matches obj for a role X reaches", the first
term is A(H) and not D(H): the denies of every held role. Since U and S are parts of H and the
explicit lines are part of the lines, A(U) and A_explicit(S) each imply A(H), and not D(H)
implies not D(U); so the whole is `not D(H) and (A(U) or A_explicit(S))`, which is what the
snapshot computes from its masks.

Context rules are `enforce(EnforceContext("2"), subject, dom, obj, ctx)` over the `p2` lines,
with the roles a deny would count (every held role in domain `*`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import casbin
from casbin.model import Model

from agentchat.catalog import Catalog
from agentchat.policy.rules import PolicySource, catalog_groups
from agentchat.policy.snapshot import ANY_DOMAIN, Roles

# Never a role name: the roles claim admits [A-Za-z0-9_.-] only and policy subjects are roles.
SUBJECT = "request:"


def _enforcer(source: PolicySource, catalog: Catalog, rules: Iterable[list[str]],
              context_rules: Iterable[list[str]] = ()) -> casbin.Enforcer:
    model = Model()
    model.load_model_from_text(source.model_text)
    enforcer = casbin.Enforcer(model)
    rules, context_rules = list(rules), list(context_rules)
    if rules:
        enforcer.add_policies(rules)
    if context_rules:
        enforcer.add_named_policies("p2", context_rules)
    if source.roles:
        enforcer.add_named_grouping_policies("g", [list(e) for e in source.roles])
    groups = [list(e) for e in (*catalog_groups(catalog), *source.groups)]
    enforcer.add_named_grouping_policies("g2", groups)
    return enforcer


class ReferenceEnforcer:
    def __init__(self, source: PolicySource, catalog: Catalog) -> None:
        tools = set(catalog.names)
        self.enforcer = _enforcer(
            source, catalog, [[r.sub, r.dom, r.obj, r.eft] for r in source.rules],
            [[r.sub, r.dom, r.obj, r.ctx] for r in source.context_rules])
        # The explicit env-less lines alone: what admits a role held in one environment only.
        self.explicit = _enforcer(
            source, catalog, [[r.sub, r.dom, r.obj, r.eft] for r in source.rules
                              if r.dom == ANY_DOMAIN and r.eft == "allow" and r.obj in tools])
        self.has_contexts = source.has_contexts
        self._context = self.enforcer.new_enforce_context("2")
        self._lock = threading.Lock()

    def _enforce(self, enforcer: casbin.Enforcer, held: Iterable[str], *rvals: object) -> bool:
        links = [[SUBJECT, role] for role in sorted(set(held))]
        with self._lock:
            if links:
                enforcer.add_named_grouping_policies("g", links)
            try:
                return bool(enforcer.enforce(*rvals))
            finally:
                if links:
                    enforcer.remove_named_grouping_policies("g", links)

    def allowed(self, roles: Roles, domain: str, obj: str) -> bool:
        if domain != ANY_DOMAIN:
            held = [role for role, env in roles if env is None or env == domain]
            return self._enforce(self.enforcer, held, SUBJECT, domain, obj)
        every = [role for role, _ in roles]
        unrestricted = [role for role, env in roles if env is None]
        scoped = [role for role, env in roles if env is not None]
        return self._enforce(self.enforcer, every, SUBJECT, domain, obj) and (
            self._enforce(self.enforcer, unrestricted, SUBJECT, domain, obj)
            or self._enforce(self.explicit, scoped, SUBJECT, domain, obj))

    def context_rule(self, roles: Roles, domain: str, obj: str, context: str) -> bool:
        """Does a p2 line match (the call needs a card in this context)?"""
        if not self.has_contexts:
            return False
        held = [role for role, env in roles
                if env is None or env == domain or domain == ANY_DOMAIN]
        return self._enforce(self.enforcer, held, self._context, SUBJECT, domain, obj, context)


def least_roles(reference: ReferenceEnforcer, source: PolicySource) -> list[str]:
    """The policy's roles, least first (docs: the fewest inherited roles, then the one the
    policy file names first), with the inheritance read from pycasbin's role manager."""
    enforcer = reference.enforcer
    first = {r: i for i, r in enumerate(source.role_order)}
    inherited = {r: len(set(enforcer.get_implicit_roles_for_user(r)) - {r}) for r in first}
    return sorted(first, key=lambda r: (inherited[r], first[r], r))


def reference_decision(reference: ReferenceEnforcer, ranked: list[str], catalog: Catalog,
                       roles: Roles, tool_name: str, env: str | None, source_env: str | None,
                       untrusted: bool, memo: dict[tuple[str, str, str | None], str | None]
                       | None = None) -> tuple[str, str | None, str | None]:
    """(decision, allow reason or None, required role) of one call by the documented rules
    (policy/README.md "How a call is checked", steps 5-6), with every policy question asked
    of pycasbin's enforce(). Only for calls whose tool and environments the catalog knows."""
    tool = next(t for t in catalog.tools if t.name == tool_name)
    domain = env or ANY_DOMAIN

    def permitted(held: Roles) -> bool:
        ok = reference.allowed(held, domain, tool_name)
        return ok and (source_env is None or reference.allowed(held, source_env, "read"))

    if not permitted(roles):
        # The least role depends on the call only, so a caller may keep it across principals.
        key = (tool_name, domain, source_env)
        memo = memo if memo is not None else {}
        if key not in memo:
            memo[key] = next((r for r in ranked if permitted(((r, None),))), None)
        return "deny", None, memo[key]
    risk = tool.risk or "destructive"
    if risk == "destructive" or (risk == "write" and env in tool.confirm_in):
        return "allow_with_confirmation", "confirmation_required", None
    if reference.context_rule(roles, domain, tool_name, "untrusted" if untrusted else "trusted"):
        return "allow_with_confirmation", "confirmation_required_untrusted", None
    return "allow", "allowed", None
