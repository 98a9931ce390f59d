"""Policy tests that platform teams ship next to their policy (`tests/*.yaml`).

Each file holds `cases`; a case names roles (as in the user JWT: `role` or `role@env`), one
environment or a list (null = an env-less call), one tool or a list, and what to expect.
Lists expand to every combination, so one case can state a whole row of a roles x environment
x tool table::

    cases:
      - name: viewers only read
        roles: [viewer]
        env: [ss-dev, prod]
        tool: [deploy_dashboard, start_maintenance]
        expect: deny                 # allow | allow_with_confirmation | deny
        reason: role_missing         # optional: the reason_code
        required_role: editor        # optional (null = no role would allow it)
        alternatives: [get_health_summary, export_config]  # optional: the actions offered
      - roles: [editor]
        env: prod
        tool: start_migration
        arguments: {source_env: ss-stage}   # optional; env fills the environment argument
        expect: allow_with_confirmation
      - roles: [editor]
        env: ss-dev
        tool: deploy_dashboard
        context: {untrusted: true}          # optional: the request's context
        expect: allow_with_confirmation
        reason: confirmation_required_untrusted

Cases check the policy, not a call's argument schema: required arguments other than the
environments may be left out (the environment checks still apply). Roles are read as from a
token: an entry a token could not carry (`admin@`, `admin@qa`, `adm*n`) is ignored.

The sidecar runs them on every reload before a new snapshot may serve; `agentchat policy test`
runs them from the command line and prints a diff of what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentchat.errors import TokenError
from agentchat.identity import parse_roles

from .engine import CheckRequest, Decision, decide
from .snapshot import Snapshot

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CaseContext(BaseModel):
    model_config = ConfigDict(extra="forbid")
    untrusted: bool = False


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    # One role set, or a list of role sets (each is checked).
    roles: list[str] | list[list[str]]
    env: str | list[str | None] | None = None
    tool: str | list[str]
    arguments: dict[str, Any] = Field(default_factory=dict)
    context: CaseContext = Field(default_factory=CaseContext)
    expect: Literal["allow", "allow_with_confirmation", "deny"]
    reason: str | None = None
    required_role: str | None = None
    alternatives: list[str] | None = None


class CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cases: list[Case] = Field(min_length=1)


@dataclass
class TestReport:
    passed: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        head = f"{self.passed} passed, {len(self.failures)} failed"
        return "\n\n".join([*self.failures, head]) if self.failures else head


def _request(snapshot: Snapshot, case: Case, env: str | None, tool: str) -> CheckRequest:
    args = dict(case.arguments)
    spec = snapshot.tools.get(tool)
    if env is not None and spec is not None and spec.environment is not None:
        args.setdefault(spec.environment.argument, env)
    return CheckRequest(request_id="policy-test", environment=env, tool=tool, arguments=args,
                        untrusted=case.context.untrusted)


def _diff(case: Case, got: Decision) -> list[str]:
    rows = []
    want: list[tuple[str, Any, Any]] = [("decision", case.expect, got.decision)]
    if case.reason is not None:
        want.append(("reason_code", case.reason, got.reason_code))
    if "required_role" in case.model_fields_set:
        want.append(("required_role", case.required_role, got.required_role))
    if case.alternatives is not None:
        want.append(("alternatives", case.alternatives,
                     [a["action"] for a in got.alternatives or []]))
    for name, expected, actual in want:
        if expected != actual:
            rows.append(f"    {name + ':':<15} expected {expected!r}, got {actual!r}")
    return rows


def run_case_file(snapshot: Snapshot, name: str, text: str, report: TestReport) -> None:
    try:
        raw = yaml.load(text, Loader=_LOADER)
        cases = CaseFile.model_validate(raw).cases
    except (yaml.YAMLError, ValidationError) as e:
        report.failures.append(f"{name}: not a valid policy test file: {e}")
        return
    for i, case in enumerate(cases, 1):
        label = case.name or f"case {i}"
        role_sets: list[list[str]] = (
            [r for r in case.roles if isinstance(r, list)]
            if case.roles and isinstance(case.roles[0], list) else [case.roles])  # type: ignore[list-item]
        envs = case.env if isinstance(case.env, list) else [case.env]
        tools = case.tool if isinstance(case.tool, list) else [case.tool]
        for role_set in role_sets:
            try:
                roles = parse_roles(role_set, snapshot.environment_set, quiet=True)
            except TokenError as e:
                report.failures.append(f"{name}: {label}: {e.detail}")
                continue
            for env in envs:
                for tool in tools:
                    got = decide(snapshot, roles, _request(snapshot, case, env, tool),
                                 check_schema=False)
                    rows = _diff(case, got)
                    if rows:
                        ctx = ", untrusted" if case.context.untrusted else ""
                        report.failures.append(
                            f"{name}: {label} (roles {','.join(role_set) or '-'}, "
                            f"env {env or '-'}, tool {tool}{ctx})\n" + "\n".join(rows))
                    else:
                        report.passed += 1


def run_policy_tests(snapshot: Snapshot) -> TestReport:
    """Run every test file shipped in the snapshot's policy folder."""
    report = TestReport()
    for name, text in snapshot.source.tests:
        run_case_file(snapshot, f"tests/{name}", text, report)
    return report
