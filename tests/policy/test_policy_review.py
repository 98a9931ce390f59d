"""Policy edits as code review (issue 22), driven from outside: `agentchat policy matrix`,
`policy diff` and `policy replay` as subprocesses, and the documented edit loop against the
running sidecar (`GET /v1/policy`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from agentchat.catalog import load_catalog
from agentchat.identity import DevUserIssuer, parse_roles
from agentchat.keys import KeyRing, sign_service_token
from agentchat.policy.diff import GitError, parse_range
from agentchat.policy.matrix import principals
from agentchat.policy.replay import ReplayError, parse_duration
from agentchat.policy.rules import read_folder
from agentchat.settings import PACKAGE_DATA, SharedSettings
from testkit.policy import PolicyClient, configmap_folder, sidecar, swap_configmap
from testkit.policy_reference import ReferenceEnforcer, least_roles, reference_decision
from testkit.support import AGENTCHAT, ROOT
from testkit.synthetic_policies import SHIPPED_POLICY, write_synthetic

CATALOG_PATH = PACKAGE_DATA / "catalog.yaml"
FIXTURES = Path(__file__).parent / "fixtures" / "diff"
OLD, NEW = FIXTURES / "old", FIXTURES / "new"
CI_FILE = ROOT / "policy" / "examples" / "ci-policy.yml"
README = (ROOT / "policy" / "README.md").read_text()
# The documented interval (policy/README.md, "The edit loop"): a change is live this long
# after the files change, with the default debounce and poll settings.
LIVE_WITHIN_S = 2.0


def _policy(*args: str, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTCHAT, "policy", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=cwd,
                          env={**os.environ, **(env or {})})


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(result.stdout)


# -- matrix --------------------------------------------------------------------------------

def _roles_in(folder: Path) -> list[str]:
    return list(read_folder(folder).role_order)


def _check_matrix_against_enforce(folder: Path) -> int:
    result = _policy("matrix", str(folder), "--format", "json")
    assert result.returncode == 0, result.stderr
    matrix = _json(result)
    catalog = load_catalog(CATALOG_PATH)
    source = read_folder(folder)
    reference = ReferenceEnforcer(source, catalog)
    ranked = least_roles(reference, source)
    memo: dict[tuple[str, str, str | None], str | None] = {}
    envs = list(catalog.environments)

    # Every principal the issue names: each role, each role@env, every pair of roles.
    roles = _roles_in(folder)
    expected_names = {*roles, *(f"{r}@{e}" for r in roles for e in envs),
                      *(f"{a}+{b}" for i, a in enumerate(roles) for b in roles[i + 1:])}
    assert {p["name"] for p in matrix["principals"]} == expected_names
    # Every call: env-less tools once, others per environment, a migration per (source, target).
    calls: set[tuple[str, str | None, str | None]] = set()
    for tool in catalog.tools:
        if tool.environment is None:
            calls.add((tool.name, None, None))
        elif tool.environment.source_argument:
            calls |= {(tool.name, t, s) for s in envs for t in envs}
        else:
            calls |= {(tool.name, e, None) for e in envs}
    cells = matrix["cells"]
    seen = {(c["principal"], c["tool"], c["env"], c["source"], c["context"]) for c in cells}
    assert seen == {(p, *call, ctx) for p in expected_names for call in calls
                    for ctx in ("trusted", "untrusted")}
    assert len(cells) == len(seen)

    for c in cells:
        held = parse_roles(c["roles"], catalog.environments, quiet=True)
        decision, reason, required = reference_decision(
            reference, ranked, catalog, held, c["tool"], c["env"], c["source"],
            c["context"] == "untrusted", memo)
        assert (c["decision"], c["required_role"]) == (decision, required), c
        if decision != "deny":
            assert c["reason"] == reason, c
        else:
            assert c["reason"] in ("role_missing", "denied_by_rule"), c
    return len(cells)


def test_the_matrix_equals_enforce_for_every_cell(tmp_path: Path) -> None:
    catalog = load_catalog(CATALOG_PATH)
    # A small synthetic policy on top of the shipped lines: scoped roles, denies, explicit
    # env-less lines and context rules, with roles that inherit along chains.
    write_synthetic(tmp_path / "synthetic", catalog, roles_per_env=2, lines_per_role=6)
    counted = [_check_matrix_against_enforce(folder)
               for folder in (SHIPPED_POLICY, NEW, tmp_path / "synthetic")]
    assert counted[0] == (4 + 4 * 3 + 6) * 52 * 2  # 22 principals x 52 calls x 2 contexts
    assert all(n > 2000 for n in counted)


def test_matrix_formats_and_extra_principals(tmp_path: Path) -> None:
    md = _policy("matrix", "--principal", "editor@ss-dev,editor@ss-stage,viewer@prod")
    assert md.returncode == 0, md.stderr
    text = md.stdout
    assert "## editor+oncall" in text and "## editor@ss-dev,editor@ss-stage,viewer@prod" not in text
    bob = text.split("## editor@ss-dev+editor@ss-stage+viewer@prod\n", 1)[1].split("\n## ")[0]
    assert "| deploy_dashboard |  | allow; untrusted: card | card | deny → editor |" in bob
    editor = text.split("## editor\n", 1)[1].split("\n## ")[0]
    assert "| start_maintenance |  | allow; untrusted: card | allow; untrusted: card | " \
           "deny by rule → oncall |" in editor
    assert "| start_migration from prod |" in editor
    pair = text.split("## editor+oncall\n", 1)[1].split("\n## ")[0]
    assert "deny by rule → oncall" in pair  # deny overrides: the pair cannot, oncall alone can

    csv_out = _policy("matrix", str(SHIPPED_POLICY), "--format", "csv", "-o",
                      str(tmp_path / "m.csv"))
    assert csv_out.returncode == 0 and csv_out.stdout == ""
    rows = (tmp_path / "m.csv").read_text().splitlines()
    assert rows[0] == ("principal,roles,tool,env,source,context,decision,reason,required_role,"
                       "approval")
    assert len(rows) == 1 + 2288
    assert "editor+oncall,editor oncall,start_maintenance,prod,,trusted,deny,denied_by_rule," \
           "oncall," in rows
    # The approval mode (issue 34): the shipped policy's prod deploy is approved by another.
    assert "editor,editor,deploy_dashboard,prod,,trusted,allow_with_confirmation," \
           "confirmation_required,,other" in rows

    broken = tmp_path / "broken"
    shutil.copytree(SHIPPED_POLICY, broken)
    (broken / "policy.csv").write_text("p, viewer, qa, read, allow\n")
    refused = _policy("matrix", str(broken))
    assert refused.returncode == 2 and "unknown environment 'qa'" in refused.stderr


_NAME = st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True)


@given(st.lists(_NAME, max_size=8), st.lists(_NAME, min_size=1, max_size=4, unique=True))
def test_principals_are_each_role_each_scoped_role_and_every_pair(
        roles: list[str], envs: list[str]) -> None:
    got = principals(roles, envs)
    n = len(set(roles))
    assert len(got) == n + n * len(envs) + n * (n - 1) // 2
    assert len({p.name for p in got}) == len(got)
    catalog_envs = frozenset(envs)
    for p in got:
        # Each principal's claim is one a token could carry: nothing in it is ignored.
        assert len(parse_roles(list(p.claim), catalog_envs, quiet=True)) == len(p.claim)
        assert len(p.claim) in (1, 2)


@given(st.text(alphabet="ab.~^1", max_size=10))
def test_git_ranges_are_two_revisions_or_refused(text: str) -> None:
    accepted = text.count("..") == 1 and "..." not in text
    try:
        old, new = parse_range(text)
    except GitError:
        assert not accepted
        return
    assert accepted
    a, b = text.split("..")
    assert (old, new) == (a or "HEAD", b or "HEAD")


# -- diff ----------------------------------------------------------------------------------

ROLES = ["editor", "viewer", "admin", "oncall", "auditor"]  # the union, in file order
ALL = {*ROLES, *(f"{r}@{e}" for r in ROLES for e in ("ss-dev", "ss-stage", "prod")),
       *(f"{a}+{b}" for i, a in enumerate(ROLES) for b in ROLES[i + 1:])}
BOTH = ("trusted", "untrusted")


def _changes(diff: dict[str, Any], kind: str) -> set[tuple[str, str, str | None, str]]:
    return {(c["principal"], c["tool"], c["env"], c["context"]) for c in diff["changes"]
            if c["kind"] == kind}


def test_diff_lists_exactly_the_changed_cells_and_test_outcomes() -> None:
    result = _policy("diff", str(OLD), str(NEW), "--format", "json")
    assert result.returncode == 1, result.stderr
    diff = _json(result)
    assert diff["cells"] == len(ALL) * 52 * 2

    # The new lines: `p, auditor, prod, list_databases|start_maintenance, allow` and
    # `p, auditor, prod, deploy_dashboard, deny`; auditor inherits nothing.
    started_old = {"oncall", "oncall@prod", "viewer+oncall", "oncall+auditor"}
    started_new = {"auditor", "auditor@prod", "viewer+auditor"}
    assert _changes(diff, "wider") == {
        *((p, "list_databases", "prod", c) for p in ("auditor", "auditor@prod") for c in BOTH),
        *((p, "start_maintenance", "prod", c) for p in started_new for c in BOTH)}
    # A deny line overrides the allows of every role held with it.
    assert _changes(diff, "narrower") == {
        (p, "deploy_dashboard", "prod", c) for p in ("editor+auditor", "admin+auditor")
        for c in BOTH}
    # Still denied, now by a rule rather than for a missing role (still needs editor).
    assert _changes(diff, "reason") == {
        (p, "deploy_dashboard", "prod", c)
        for p in ("auditor", "auditor@prod", "viewer+auditor", "oncall+auditor") for c in BOTH}
    # auditor inherits nothing, so it is now the least role that starts maintenance in prod,
    # for everyone still denied it.
    assert _changes(diff, "required_role") == {
        (p, "start_maintenance", "prod", c) for p in ALL - started_old - started_new
        for c in BOTH}
    assert all((c["old"]["required_role"], c["new"]["required_role"]) == ("oncall", "auditor")
               for c in diff["changes"] if c["kind"] == "required_role")
    assert diff["counts"] == {"wider": 10, "narrower": 4, "required_role": 46, "approval": 0,
                              "reason": 8}

    tests = {(t["file"], t["roles"][0], t["old"], t["new"]) for t in diff["tests"]}
    assert tests == {
        ("tests/roles.yaml (old)", "editor", "pass", "fail"),
        ("tests/roles.yaml (old)", "admin", "pass", "fail"),
        ("tests/roles.yaml (new)", "editor", "fail", "pass"),
        ("tests/roles.yaml (new)", "admin", "fail", "pass"),
        ("tests/auditor.yaml", "auditor", "fail", "pass"),
    }
    assert (diff["old"]["tests"], diff["new"]["tests"]) == (
        {"passed": 88, "failed": 0}, {"passed": 89, "failed": 0})

    md = _policy("diff", str(OLD), str(NEW)).stdout
    assert ("68 of 3120 cells change: 10 wider, 4 narrower, 46 required role, 0 approval, "
            "8 reason.") in md
    assert "| editor+auditor | deploy_dashboard | prod (untrusted) | card | " \
           "deny by rule → editor |" in md
    assert "## Policy tests whose outcome changes: 5" in md


def test_diff_exit_codes(tmp_path: Path) -> None:
    same = tmp_path / "same"
    shutil.copytree(OLD, same)
    with (same / "policy.csv").open("a") as f:
        f.write("\n# a comment changes the revision, not a decision\n")
    unchanged = _policy("diff", str(OLD), str(same))
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "No decision changes in 2288 cells" in unchanged.stdout

    broken = tmp_path / "broken"
    shutil.copytree(NEW, broken)
    with (broken / "policy.csv").open("a") as f:
        f.write("p, auditor, qa, read, allow\n")
    refused = _policy("diff", str(OLD), str(broken))
    assert refused.returncode == 2 and refused.stdout == ""
    assert "the new policy" in refused.stderr and "unknown environment 'qa'" in refused.stderr
    assert "policy.csv:" in refused.stderr
    assert _policy("diff", str(broken), str(OLD)).returncode == 2
    assert _policy("diff", str(OLD)).returncode == 2

    # Each side may name its own catalog: here deploys in ss-stage no longer need a card.
    catalog = tmp_path / "catalog.yaml"
    raw = yaml.safe_load(CATALOG_PATH.read_text())
    deploy = next(t for t in raw["tools"] if t["name"] == "deploy_dashboard")
    deploy["confirm_in"] = ["prod"]
    catalog.write_text(yaml.safe_dump(raw, allow_unicode=True))
    other = _policy("diff", str(OLD), str(OLD), "--new-catalog", str(catalog), "--format",
                    "json")
    assert other.returncode == 1, other.stderr
    changes = _json(other)["changes"]
    assert changes and {(c["kind"], c["tool"], c["env"], c["context"], c["new"]["decision"])
                        for c in changes} == {
        ("wider", "deploy_dashboard", "ss-stage", "trusted", "allow"),
        # Untrusted, it still needs a card, now asked for by the p2 line, not the catalog.
        ("reason", "deploy_dashboard", "ss-stage", "untrusted", "allow_with_confirmation")}
    assert "editor@ss-stage" in {c["principal"] for c in changes}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True, env={**os.environ, "GIT_AUTHOR_NAME": "t",
                                          "GIT_AUTHOR_EMAIL": "t@example.com",
                                          "GIT_COMMITTER_NAME": "t",
                                          "GIT_COMMITTER_EMAIL": "t@example.com"}).stdout


def _platform_repo(root: Path) -> Path:
    """The platform team's repository: the old policy on main, the edit on a branch."""
    repo = root / "platform"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shutil.copytree(OLD, repo / "policy")
    _git(repo, "add", "policy")
    _git(repo, "commit", "-qm", "the policy")
    _git(repo, "checkout", "-qb", "auditor")
    shutil.rmtree(repo / "policy")
    shutil.copytree(NEW, repo / "policy")
    _git(repo, "add", "-A", "policy")
    _git(repo, "commit", "-qm", "an auditor role")
    return repo


def test_diff_between_two_git_revisions(tmp_path: Path) -> None:
    repo = _platform_repo(tmp_path)
    by_dirs = _json(_policy("diff", str(OLD), str(NEW), "--format", "json"))
    by_git = _policy("diff", "--git", "main..auditor", "policy", "--format", "json", cwd=repo)
    assert by_git.returncode == 1, by_git.stderr
    got = _json(by_git)
    assert got["changes"] == by_dirs["changes"] and got["tests"] == by_dirs["tests"]
    assert got["old"]["policy"] == "main:policy" and got["new"]["policy"] == "auditor:policy"
    # `REV..` is REV..HEAD, as in git; from a sub-folder the path is relative to it.
    (repo / "sub").mkdir()
    from_sub = _policy("diff", "--git", "main..", "../policy", "--format", "json",
                       cwd=repo / "sub")
    assert from_sub.returncode == 1 and _json(from_sub)["changes"] == by_dirs["changes"]
    assert _policy("diff", "--git", "main..main", "policy", cwd=repo).returncode == 0
    for bad in (("--git", "main..nope", "policy"), ("--git", "main", "policy"),
                ("--git", "main..auditor", "elsewhere")):
        refused = _policy("diff", *bad, cwd=repo)
        assert refused.returncode == 2, bad
        assert refused.stderr.startswith("policy diff: "), refused.stderr


# -- replay --------------------------------------------------------------------------------

def _service_token(settings: SharedSettings, ring: KeyRing) -> str:
    return sign_service_token(ring, issuer=settings.service_issuer,
                              audience=settings.service_audience)


# (user, roles, tool, env, extra arguments, untrusted)
CALLS: list[tuple[str, list[str], str, str | None, dict[str, Any], bool]] = [
    (user, roles, tool, env, extra, untrusted)
    for user, roles in (("ann", ["auditor"]), ("eve", ["editor", "auditor"]),
                        ("val", ["viewer"]), ("olga", ["oncall"]), ("ed", ["editor"]),
                        ("bob", ["editor@ss-dev", "editor@ss-stage", "viewer@prod"]),
                        ("pam", ["auditor@prod", "viewer@ss-dev"]))
    for tool, env, extra in (("list_databases", "prod", {}),
                             ("deploy_dashboard", "prod", {"dashboard_id": 1}),
                             ("start_maintenance", "prod", {}),
                             ("deploy_dashboard", "ss-dev", {"dashboard_id": 1}),
                             ("start_migration", "prod", {"source_env": "ss-dev",
                                                          "dashboard_id": 1}),
                             ("get_dashboard", None, {"dashboard_id": 1}))
    for untrusted in (False, True)
]


def _send(client: PolicyClient, issuer: DevUserIssuer) -> list[str]:
    decisions = []
    for i, (user, roles, tool, env, extra, untrusted) in enumerate(CALLS):
        args = dict(extra)
        if tool == "start_migration":
            args["target_env"] = env
        elif env is not None:
            args["env_id"] = env
        body = {"request_id": f"call-{i}", "environment": env, "tool": tool,
                "arguments": args, "context": {"untrusted": untrusted}}
        answer = client.check(issuer.mint(user, roles), tool, body=body).json()
        decisions.append(answer["decision"])
    # What a replay skips: a refused user token and arguments that fail their schema.
    client.check("not-a-token", "list_environments")
    client.check(issuer.mint("ann", ["auditor"]), "deploy_dashboard", "prod", env_id="prod",
                 dashboard_id="x")
    return decisions


@pytest.fixture
def recorded(settings: SharedSettings, ring: KeyRing, issuer: DevUserIssuer,
             tmp_path: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """A decision log recorded by a sidecar serving OLD, and the answers of a sidecar serving
    NEW to the same calls: the ground truth of what flips."""
    token = _service_token(settings, ring)
    answers = {}
    for name, folder in (("old", OLD), ("new", NEW)):
        logs = tmp_path / name
        logs.mkdir()
        with sidecar(settings.data_dir, configmap_folder(tmp_path / f"{name}-policy", folder),
                     logs) as svc:
            answers[name] = _send(PolicyClient(svc.url, token), issuer)
    yield tmp_path / "old" / "decisions.jsonl", answers["old"], answers["new"]


def test_replay_counts_the_flips_a_policy_change_causes(
        recorded: tuple[Path, list[str], list[str]], tmp_path: Path) -> None:
    log, old, new = recorded
    flipped = {f"call-{i}" for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b}
    # By hand: auditors now read databases and start maintenance in prod (ann, pam); the
    # auditor deny overrides eve's editor deploy in prod.
    assert flipped == {f"call-{i}" for i, (user, _, tool, env, _, _) in enumerate(CALLS)
                       if (user in ("ann", "pam") and env == "prod"
                           and tool in ("list_databases", "start_maintenance"))
                       or (user, tool, env) == ("eve", "deploy_dashboard", "prod")}

    result = _policy("replay", str(NEW), "--log", str(log), "--format", "json")
    assert result.returncode == 1, result.stderr
    report = _json(result)
    assert report["read"] == len(CALLS) + 2
    assert report["replayed"] == len(CALLS)
    assert report["skipped"] == {"user token was invalid": 1, "invalid_arguments": 1}
    assert report["flipped"] == len(flipped)
    assert {f["request_id"] for f in report["flips"]} == flipped
    assert report["wider"] + report["narrower"] == len(flipped)
    assert report["wider"] > 0 and report["narrower"] > 0
    for f in report["flips"]:
        i = int(f["request_id"].split("-")[1])
        assert (f["old"]["decision"], f["new"]["decision"]) == (old[i], new[i])
    assert any(f["tool"] == "start_migration" for f in report["flips"]) or all(
        old[i] == new[i] for i, c in enumerate(CALLS) if c[2] == "start_migration")

    same = _policy("replay", str(OLD), "--log", str(log))
    assert same.returncode == 0, same.stdout
    assert "**0 would flip**" in same.stdout
    md = _policy("replay", str(NEW), "--log", str(log)).stdout
    assert f"**{len(flipped)} would flip**" in md

    # --since: only recent records. Age half the log by two days, then replay the last hour,
    # from the configured log path, and from stdin as `kubectl logs` would give it.
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    old_ts = (datetime.now(UTC) - timedelta(days=2)).isoformat(timespec="milliseconds")
    aged = tmp_path / "aged.jsonl"
    aged.write_text("".join(
        json.dumps({**x, "ts": old_ts} if i % 2 else x) + "\n" for i, x in enumerate(lines))
        + "INFO agentchat.policy: policy revision loaded\n")
    recent = {x["request_id"] for i, x in enumerate(lines) if not i % 2}
    since = _policy("replay", str(NEW), "--since", "1h", "--format", "json",
                    env={"AGENTCHAT_POLICY_DECISION_LOG_PATH": str(aged)})
    assert since.returncode == 1, since.stderr
    got = _json(since)
    assert got["read"] == len(recent)
    assert {f["request_id"] for f in got["flips"]} == flipped & recent
    piped = subprocess.run([AGENTCHAT, "policy", "replay", str(NEW), "--log", "-",
                            "--format", "json"], input=aged.read_text(), capture_output=True,
                           text=True, timeout=120, check=False)
    assert _json(piped)["skipped"]["not a decision record"] == 1
    assert _json(piped)["flipped"] == len(flipped)
    assert _policy("replay", str(NEW), "--since", "yesterday", "--log",
                   str(log)).returncode == 2
    assert _policy("replay", str(NEW)).returncode == 2


@given(st.lists(st.tuples(st.integers(0, 999), st.sampled_from(["ms", "s", "m", "h", "d", "w"])),
                min_size=1, max_size=4))
def test_durations_are_read_part_by_part(parts: list[tuple[int, str]]) -> None:
    seconds = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = "".join(f"{n}{unit}" for n, unit in parts)
    total = sum(n * seconds[unit] for n, unit in parts)
    if total <= 0:
        with pytest.raises(ReplayError):
            parse_duration(text)
    else:
        assert parse_duration(text).total_seconds() == pytest.approx(total)


@given(st.text(max_size=12))
def test_a_duration_is_a_duration_or_refused(text: str) -> None:
    try:
        value = parse_duration(text)
    except ReplayError:
        return
    assert value.total_seconds() > 0


# -- GET /v1/policy and the documented edit loop ---------------------------------------------

def test_the_documented_loop_against_the_running_sidecar(
        settings: SharedSettings, ring: KeyRing, issuer: DevUserIssuer, tmp_path: Path) -> None:
    """policy/README.md "The edit loop", step by step: edit on a branch, the CI job's steps
    (run from policy/examples/ci-policy.yml), merge (the mounted ConfigMap changes), live
    within the documented interval; then a broken edit, refused and named by /v1/policy."""
    assert f"within {LIVE_WITHIN_S:.0f} seconds" in README.split("### The edit loop")[1]
    repo = _platform_repo(tmp_path)
    steps = {s["id"]: s["run"] for s in
             yaml.safe_load(CI_FILE.read_text())["jobs"]["review"]["steps"] if "id" in s}
    assert set(steps) == {"policy-test", "policy-diff"}
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    ci_env = {**os.environ, "PATH": f"{Path(AGENTCHAT).parent}:{os.environ['PATH']}",
              "POLICY_DIR": "policy", "BASE": "main", "GITHUB_STEP_SUMMARY": str(summary),
              "GITHUB_OUTPUT": str(outputs)}

    def ci(step: str) -> subprocess.CompletedProcess[str]:
        # GitHub runs `run:` with bash -e -o pipefail.
        return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                               steps[step]], cwd=repo, env=ci_env, capture_output=True,
                              text=True, timeout=300, check=False)

    assert ci("policy-test").returncode == 0
    diff_step = ci("policy-diff")
    assert diff_step.returncode == 0, diff_step.stderr  # changes are for review, not a failure
    assert "changed=true" in outputs.read_text()
    assert "68 of 3120 cells change" in summary.read_text()

    mounted = configmap_folder(tmp_path / "mounted", OLD)
    extra = {"AGENTCHAT_POLICY_TUNING__RELOAD_DEBOUNCE_MS": "200",  # the defaults the docs promise
             "AGENTCHAT_POLICY_TUNING__RELOAD_POLL_S": "10"}
    with sidecar(settings.data_dir, mounted, tmp_path, **extra) as svc:
        client = PolicyClient(svc.url, _service_token(settings, ring))
        for headers in ({}, {"Authorization": "Bearer nope"}):
            refused = client.http.get("/v1/policy", headers=headers)
            assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHORIZED"

        def status() -> dict[str, Any]:
            r = client.http.get("/v1/policy",
                                headers={"Authorization": f"Bearer {client.service_token}"})
            assert r.status_code == 200, r.text
            return dict(r.json())

        first = status()
        assert first["policy_revision"] == client.readyz()["policy_revision"]
        assert first["tests"] == {"passed": 88, "failed": 0}
        assert {f["path"] for f in first["files"]} == {
            "model.conf", "policy.csv", "tests/roles.yaml", "tests/scoped.yaml"}
        assert first["version"].startswith("..v") and first["last_rejected"] is None
        auditor = issuer.mint("ann", ["auditor"])
        assert client.check(auditor, "list_databases", "prod",
                            env_id="prod").json()["decision"] == "deny"

        # Merge: kubelet swaps the ConfigMap's files to the merged folder.
        _git(repo, "checkout", "-q", "main")
        _git(repo, "merge", "-q", "--ff-only", "auditor")
        changed_at = time.monotonic()
        def merged(version: Path) -> None:
            shutil.rmtree(version)
            shutil.copytree(repo / "policy", version)

        swap_configmap(mounted, merged)
        while (live := status())["policy_revision"] == first["policy_revision"]:
            assert time.monotonic() - changed_at < LIVE_WITHIN_S, "the edit is not live yet"
            time.sleep(0.02)
        print(f"good edit live after {time.monotonic() - changed_at:.3f} s")
        assert live["tests"] == {"passed": 89, "failed": 0}
        assert "tests/auditor.yaml" in {f["path"] for f in live["files"]}
        assert (live["last_reload_error"], live["reload_failing"]) == (None, False)
        assert client.check(auditor, "list_databases", "prod",
                            env_id="prod").json()["decision"] == "allow"

        # A broken edit: CI refuses it (exit 2); merged anyway, the sidecar refuses it too.
        with (repo / "policy" / "policy.csv").open("a") as f:
            f.write("p, auditor, qa, read, allow\n")
        assert ci("policy-test").returncode == 2
        changed_at = time.monotonic()
        def broken_csv(version: Path) -> None:
            shutil.copyfile(repo / "policy" / "policy.csv", version / "policy.csv")

        swap_configmap(mounted, broken_csv)
        while (broken := status())["last_rejected"] is None:
            assert time.monotonic() - changed_at < LIVE_WITHIN_S, "the broken edit went unseen"
            time.sleep(0.02)
        print(f"broken edit refused after {time.monotonic() - changed_at:.3f} s")
        assert broken["policy_revision"] == live["policy_revision"]
        assert broken["reload_failing"] is True
        reason = broken["last_rejected"]["reason"]
        assert "policy.csv:" in reason and "unknown environment 'qa'" in reason
        assert broken["last_reload_error"] == reason
        assert broken["reloads"]["failed"] >= 1
        # The last good policy keeps answering.
        kept = client.check(auditor, "list_databases", "prod", env_id="prod").json()
        assert (kept["decision"], kept["policy_revision"]) == ("allow", live["policy_revision"])
        assert client.readyz()["last_reload_error"] == reason
