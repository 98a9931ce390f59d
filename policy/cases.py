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


@dataclass(frozen=True)
class Outcome:
    """One expanded combination of a case: where it is, what it checked, whether it passed."""

    file: str
    label: str
    roles: tuple[str, ...]
    env: str | None
    tool: str
    untrusted: bool
    rows: tuple[str, ...]  # what differs (empty: passed)

    @property
    def passed(self) -> bool:
        return not self.rows

    @property
    def key(self) -> tuple[str, str, tuple[str, ...], str | None, str, bool]:
        return (self.file, self.label, self.roles, self.env, self.tool, self.untrusted)

    def title(self) -> str:
        ctx = ", untrusted" if self.untrusted else ""
        return (f"{self.file}: {self.label} (roles {','.join(self.roles) or '-'}, "
                f"env {self.env or '-'}, tool {self.tool}{ctx})")


def case_outcomes(snapshot: Snapshot, name: str, text: str) -> tuple[list[Outcome], list[str]]:
    """Every combination of every case in one file, and the errors that stop a file or case
    from running at all (not valid YAML, a roles claim no token could carry)."""
    try:
        raw = yaml.load(text, Loader=_LOADER)
        cases = CaseFile.model_validate(raw).cases
    except (yaml.YAMLError, ValidationError) as e:
        return [], [f"{name}: not a valid policy test file: {e}"]
    outcomes: list[Outcome] = []
    errors: list[str] = []
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
                errors.append(f"{name}: {label}: {e.detail}")
                continue
            for env in envs:
                for tool in tools:
                    got = decide(snapshot, roles, _request(snapshot, case, env, tool),
                                 check_schema=False)
                    outcomes.append(Outcome(name, label, tuple(role_set), env, tool,
                                            case.context.untrusted, tuple(_diff(case, got))))
    return outcomes, errors


def run_case_file(snapshot: Snapshot, name: str, text: str, report: TestReport) -> None:
    outcomes, errors = case_outcomes(snapshot, name, text)
    report.failures.extend(errors)
    for outcome in outcomes:
        if outcome.passed:
            report.passed += 1
        else:
            report.failures.append(outcome.title() + "\n" + "\n".join(outcome.rows))


def run_policy_tests(snapshot: Snapshot) -> TestReport:
    """Run every test file shipped in the snapshot's policy folder."""
    report = TestReport()
    for name, text in snapshot.source.tests:
        run_case_file(snapshot, f"tests/{name}", text, report)
    return report
