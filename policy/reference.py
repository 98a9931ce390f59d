"""pycasbin's own `enforce()` over the same policy: the reference the snapshot is tested against.

Slow (milliseconds a check at 2,000 lines) and not safe to share between threads while a
check runs, so it never answers requests: tests and the benchmark compare it with the
snapshot. The user's roles reach Casbin the way a user would: one request subject linked to
the roles that apply in the checked domain, added before the check and removed after, so no
user id is ever kept in the enforcer.
"""

from __future__ import annotations

import threading

import casbin
from casbin.model import Model

from agentchat.catalog import Catalog

from .rules import PolicySource, catalog_groups
from .snapshot import ANY_DOMAIN, Roles

SUBJECT = "__request__"  # never a role name: policy subjects are roles


class ReferenceEnforcer:
    def __init__(self, source: PolicySource, catalog: Catalog) -> None:
        model = Model()
        model.load_model_from_text(source.model_text)
        self.enforcer = casbin.Enforcer(model)
        if source.rules:
            self.enforcer.add_policies([[r.sub, r.dom, r.obj, r.eft] for r in source.rules])
        if source.roles:
            self.enforcer.add_named_grouping_policies("g", [list(e) for e in source.roles])
        groups = [list(e) for e in (*catalog_groups(catalog), *source.groups)]
        self.enforcer.add_named_grouping_policies("g2", groups)
        self._lock = threading.Lock()

    def allowed(self, roles: Roles, domain: str, obj: str) -> bool:
        held = sorted({role for role, env in roles
                       if env is None or env == domain or domain == ANY_DOMAIN})
        links = [[SUBJECT, role] for role in held]
        with self._lock:
            if links:
                self.enforcer.add_named_grouping_policies("g", links)
            try:
                return bool(self.enforcer.enforce(SUBJECT, domain, obj))
            finally:
                if links:
                    self.enforcer.remove_named_grouping_policies("g", links)
