"""The compiled, immutable form of one loaded policy, answering in microseconds.

pycasbin's `enforce()` walks every policy line through an expression evaluator on each call
(~7 ms at 2,000 lines here) and its shared role manager gives wrong answers when a reload or
another thread changes it mid-check. The snapshot does the walking once, at load: for every
role and domain it stores two bit sets over the objects (catalog tools plus the source `read`
check), one of what the role's lines allow and one of what they deny, with inherited roles
folded in. A check ORs the masks of the user's roles for the domain (memoized per role set)
and tests one bit. Nothing in it changes after compiling, so a reload swaps one reference.

Which of the user's roles count (`Roles` are (role, env or None = every environment)):
- in an environment's domain: the roles held everywhere and the ones held in that environment;
- in domain `*` (an env-less call): the roles held everywhere, plus, for roles held in one
  environment only (`role@env`), just the *explicit* lines: `p, <role>, *, <tool>, allow`
  naming the tool itself (not a group, not `*`). The deny lines of every held role apply.
Context rules (`p2`) are masks too, per (role, domain, context); they count the roles a deny
would (a p2 line only ever adds a card).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentchat.catalog import Catalog

from .approvals import ApprovalRule
from .rules import (
    CONTEXT_RULE_CONTEXTS,
    SOURCE_OBJECT,
    ContextRule,
    PolicySource,
    Rule,
    catalog_groups,
)

ANY_DOMAIN = "*"
Roles = tuple[tuple[str, str | None], ...]  # Principal.roles: (role, env or None = every env)
_MEMO_LIMIT = 4096


def _closure(edges: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    """Each node with everything it reaches (itself included)."""
    parents: dict[str, set[str]] = {}
    for child, parent in edges:
        parents.setdefault(child, set()).add(parent)
        parents.setdefault(parent, set())
    out: dict[str, frozenset[str]] = {}

    def reach(node: str) -> frozenset[str]:
        if node not in out:
            acc = {node}
            for p in parents[node]:
                if p != node:
                    acc |= reach(p)
            out[node] = frozenset(acc)
        return out[node]

    for node in parents:
        reach(node)
    return out


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    denied_by_rule: bool  # a deny line matched (else, if not allowed, no role allowed it)


class Snapshot:
    """One policy compiled against one catalog. Never mutated after __init__ (memos aside)."""

    def __init__(self, source: PolicySource, catalog: Catalog) -> None:
        self.revision = source.revision
        self.source = source
        self.catalog = catalog
        self.environments = tuple(catalog.environments)
        self.environment_set = frozenset(self.environments)
        self.domains = (*self.environments, ANY_DOMAIN)
        self.tools = {t.name: t for t in catalog.tools}
        objects = [*self.tools, *([SOURCE_OBJECT] if SOURCE_OBJECT not in self.tools else [])]
        self.obj_bit = {o: 1 << i for i, o in enumerate(objects)}
        all_bits = (1 << len(objects)) - 1

        obj_groups = _closure((*catalog_groups(catalog), *source.groups))
        ancestors = _closure(source.roles)
        lines: tuple[Rule | ContextRule, ...] = (*source.rules, *source.context_rules)
        for r in lines:
            ancestors.setdefault(r.sub, frozenset({r.sub}))

        def obj_bits(target: str) -> int:
            if target == "*":
                return all_bits
            bits = 0
            for obj, bit in self.obj_bit.items():
                if target in obj_groups.get(obj, (obj,)):
                    bits |= bit
            return bits

        # Direct masks per (role, domain) from the p lines; explicit env-less allows per role
        # (domain *, the tool's own name); context masks per (role, domain, context).
        direct: dict[tuple[str, str], list[int]] = {}
        explicit: dict[str, int] = {}
        ctx_direct: dict[tuple[str, str, str], int] = {}
        for rule in source.rules:
            bits = obj_bits(rule.obj)
            for dom in (self.domains if rule.dom == ANY_DOMAIN else (rule.dom,)):
                slot = direct.setdefault((rule.sub, dom), [0, 0])
                slot[0 if rule.eft == "allow" else 1] |= bits
            if rule.dom == ANY_DOMAIN and rule.eft == "allow" and rule.obj in self.tools:
                explicit[rule.sub] = explicit.get(rule.sub, 0) | self.obj_bit[rule.obj]
        for ctx_rule in source.context_rules:
            bits = obj_bits(ctx_rule.obj)
            for dom in (self.domains if ctx_rule.dom == ANY_DOMAIN else (ctx_rule.dom,)):
                key = (ctx_rule.sub, dom, ctx_rule.ctx)
                ctx_direct[key] = ctx_direct.get(key, 0) | bits

        # Effective masks: a role's own lines and every inherited role's.
        self._eff: dict[str, dict[str, tuple[int, int]]] = {}
        self._explicit: dict[str, int] = {}
        self._ctx_eff: dict[str, dict[tuple[str, str], int]] = {}
        for role, inherited in ancestors.items():
            per_dom = {}
            for dom in self.domains:
                allow = deny = 0
                for a in inherited:
                    masks = direct.get((a, dom))
                    if masks:
                        allow |= masks[0]
                        deny |= masks[1]
                per_dom[dom] = (allow, deny)
            self._eff[role] = per_dom
            self._explicit[role] = 0
            for a in inherited:
                self._explicit[role] |= explicit.get(a, 0)
            per_ctx = {}
            for dom in self.domains:
                for ctx in CONTEXT_RULE_CONTEXTS:
                    bits = 0
                    for a in inherited:
                        bits |= ctx_direct.get((a, dom, ctx), 0)
                    if bits:
                        per_ctx[(dom, ctx)] = bits
            self._ctx_eff[role] = per_ctx
        # "Least" role first: the one that brings the fewest inherited roles, then the one
        # the policy file names first (platform teams list their main roles first).
        first = {r: i for i, r in enumerate(source.role_order)}
        self._ranked = sorted(ancestors, key=lambda r: (len(ancestors[r]), first.get(r, 1 << 30),
                                                        r))
        self._ancestors = ancestors
        self._obj_groups = obj_groups
        self._memo: dict[tuple[Roles, str], tuple[int, int]] = {}
        self._ctx_memo: dict[tuple[Roles, str, str], int] = {}
        self._required: dict[tuple[str, str, str | None], str | None] = {}

    # -- checks ---------------------------------------------------------------------------

    def masks(self, roles: Roles, domain: str) -> tuple[int, int]:
        """(allow, deny) bit sets of a user's roles in a domain."""
        key = (roles, domain)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        allow = deny = 0
        for role, env in roles:
            eff = self._eff.get(role)
            if eff is None:
                continue
            if env is None or env == domain:
                a, d = eff[domain]
                allow |= a
                deny |= d
            elif domain == ANY_DOMAIN:
                # A role held in one environment, in an env-less call: only the explicit lines
                # admit it, while its denies still apply.
                allow |= self._explicit[role]
                deny |= eff[domain][1]
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()  # a bound, not an LRU: role sets repeat heavily in practice
        self._memo[key] = (allow, deny)
        return allow, deny

    def check(self, roles: Roles, domain: str, obj: str) -> Verdict:
        """May these roles use `obj` (a catalog tool, or `read` for a source) in `domain`?"""
        bit = self.obj_bit.get(obj)
        if bit is None or domain not in self.domains:
            return Verdict(False, False)
        allow, deny = self.masks(roles, domain)
        if deny & bit:
            return Verdict(False, True)
        return Verdict(bool(allow & bit), False)

    def context_rule(self, roles: Roles, domain: str, obj: str, context: str) -> bool:
        """Does a `p2` line say that this call needs a card in this request context?"""
        bit = self.obj_bit.get(obj)
        if bit is None or domain not in self.domains or context not in CONTEXT_RULE_CONTEXTS:
            return False
        key = (roles, domain, context)
        bits = self._ctx_memo.get(key)
        if bits is None:
            bits = 0
            for role, env in roles:
                if env is None or env == domain or domain == ANY_DOMAIN:
                    bits |= self._ctx_eff.get(role, {}).get((domain, context), 0)
            if len(self._ctx_memo) >= _MEMO_LIMIT:
                self._ctx_memo.clear()
            self._ctx_memo[key] = bits
        return bool(bits & bit)

    def required_role(self, domain: str, obj: str, source: str | None = None) -> str | None:
        """The least role that alone would allow the call (and read on the source), if any."""
        key = (domain, obj, source)
        if key in self._required:
            return self._required[key]
        found = None
        for role in self._ranked:
            one: Roles = ((role, None),)
            if self.check(one, domain, obj).allowed and (
                    source is None or self.check(one, source, SOURCE_OBJECT).allowed):
                found = role
                break
        self._required[key] = found
        return found

    # -- approvals (docs/protocol.md §11) ----------------------------------------------------------

    def approval_rule(self, tool: str, environment: str | None) -> ApprovalRule | None:
        """The first approvals.yaml rule naming this tool (or a group it is in) and this
        environment (an env-less call matches only `*`); None: the requester confirms."""
        groups = self._obj_groups.get(tool, frozenset({tool}))
        for rule in self.source.approvals:
            if "*" not in rule.environments and environment not in rule.environments:
                continue
            if "*" in rule.tools or any(t in groups for t in rule.tools):
                return rule
        return None

    def may_approve(self, roles: Roles, environment: str | None, rule: ApprovalRule) -> bool:
        """Do these roles hold one of the rule's approver roles in this environment? A role
        held everywhere or in that environment counts, with the roles it inherits (g lines)."""
        wanted = set(rule.approvers)
        for role, env in roles:
            if env is not None and env != environment:
                continue
            if wanted & self._ancestors.get(role, frozenset({role})):
                return True
        return False

    # -- explain (not on the hot path) ----------------------------------------------------

    def matching_rules(self, roles: Roles, domain: str, obj: str) -> list[Rule]:
        """The p lines that match a request: the ones behind its allow or deny."""
        full: set[str] = set()  # roles whose every line counts here
        scoped: set[str] = set()  # role@env in domain *: explicit allows and denies only
        for role, env in roles:
            inherited = self._ancestors.get(role, frozenset({role}))
            if env is None or env == domain:
                full |= inherited
            elif domain == ANY_DOMAIN:
                scoped |= inherited
        groups = self._obj_groups.get(obj, frozenset({obj}))
        out = []
        for r in self.source.rules:
            if r.dom not in (ANY_DOMAIN, domain) or not (r.obj == "*" or r.obj in groups):
                continue
            if r.sub in full or (r.sub in scoped and (
                    r.eft == "deny" or (r.obj == obj and obj in self.tools))):
                out.append(r)
        return out

    def matching_context_rules(self, roles: Roles, domain: str, obj: str,
                               context: str) -> list[ContextRule]:
        """The p2 lines that match a request in a context: the ones behind a context card."""
        held: set[str] = set()
        for role, env in roles:
            if env is None or env == domain or domain == ANY_DOMAIN:
                held |= self._ancestors.get(role, frozenset({role}))
        groups = self._obj_groups.get(obj, frozenset({obj}))
        return [r for r in self.source.context_rules
                if r.sub in held and r.dom in (ANY_DOMAIN, domain) and r.ctx == context
                and (r.obj == "*" or r.obj in groups)]

    @property
    def roles(self) -> list[str]:
        return list(self._ranked)
