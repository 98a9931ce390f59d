"""`agentchat policy test` and `agentchat policy explain`, run as the platform team runs them;
and the verified-token cache."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agentchat.errors import TokenError
from agentchat.identity import DevUserIssuer, user_verifier
from agentchat.settings import SharedSettings
from agentchat.verified_tokens import CachedVerifier
from testkit.support import AGENTCHAT
from testkit.synthetic_policies import SHIPPED_POLICY


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENTCHAT, "policy", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_policy_test_passes_on_the_shipped_policy() -> None:
    result = _run("test")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 failed" in result.stdout


def test_policy_test_fails_with_a_readable_diff(tmp_path: Path) -> None:
    broken = tmp_path / "policy"
    shutil.copytree(SHIPPED_POLICY, broken)
    csv = broken / "policy.csv"
    csv.write_text(csv.read_text().replace("p, admin, *, destructive, allow", "# removed"))
    result = _run("test", str(broken))
    assert result.returncode == 1
    assert ("tests/roles.yaml: destructive needs a card everywhere "
            "(roles admin, env prod, tool delete_dashboard)\n"
            "    decision:       expected 'allow_with_confirmation', got 'deny'") in result.stdout
    assert "80 passed, 8 failed" in result.stdout


def test_policy_test_cases_with_a_context(tmp_path: Path) -> None:
    broken = tmp_path / "policy"
    shutil.copytree(SHIPPED_POLICY, broken)
    csv = broken / "policy.csv"
    csv.write_text(csv.read_text().replace("p2, viewer, *, write, untrusted", "# removed"))
    (broken / "tests" / "untrusted.yaml").write_text(
        "cases:\n  - name: reads stay free\n    roles: [viewer@prod]\n    env: prod\n"
        "    tool: list_databases\n    context: {untrusted: true}\n    expect: allow\n")
    result = _run("test", str(broken))
    assert result.returncode == 1
    assert "11 rules, 0 context rules" in result.stdout
    assert ("tests/roles.yaml: in an untrusted context (ss-tools output in the turn) every write "
            "needs a card (roles editor, env ss-dev, tool deploy_dashboard, untrusted)\n"
            "    decision:       expected 'allow_with_confirmation', got 'allow'\n"
            "    reason_code:    expected 'confirmation_required_untrusted', got 'allowed'"
            ) in result.stdout
    assert "reads stay free" not in result.stdout
    assert ", 9 failed" in result.stdout
    (broken / "tests" / "bad.yaml").write_text(
        "cases:\n  - roles: [viewer]\n    tool: list_environments\n"
        "    context: {untrusted: true, origin: web}\n    expect: allow\n")
    assert "tests/bad.yaml: not a valid policy test file" in _run("test", str(broken)).stdout


def test_policy_test_reports_a_folder_that_does_not_load(tmp_path: Path) -> None:
    broken = tmp_path / "policy"
    shutil.copytree(SHIPPED_POLICY, broken)
    with (broken / "policy.csv").open("a") as f:
        f.write("p, viewer, qa, read, allow\n")
    result = _run("test", str(broken))
    assert result.returncode == 2
    assert "policy.csv:" in result.stderr and "unknown environment 'qa'" in result.stderr


def test_explain_names_the_rule_and_the_role(settings: SharedSettings,
                                             issuer: DevUserIssuer) -> None:
    result = _run("explain", "--roles", "editor", "--env", "prod", "--tool", "start_maintenance")
    assert result.returncode == 1
    assert "decision:      deny (denied_by_rule)" in result.stdout
    assert "required role: oncall" in result.stdout
    assert "p, editor, prod, start_maintenance, deny" in result.stdout
    with_token = subprocess.run(
        [AGENTCHAT, "policy", "explain", "--token", issuer.mint("bob"), "--env", "ss-dev",
         "--tool", "deploy_dashboard"], capture_output=True, text=True, timeout=120,
        check=False, env={"AGENTCHAT_DATA_DIR": str(settings.data_dir), "PATH": "/usr/bin"})
    assert with_token.returncode == 0, with_token.stderr
    assert "user bob" in with_token.stdout and "decision:      allow (allowed)" in with_token.stdout


def test_explain_shows_the_context_rule_and_ignored_roles() -> None:
    base = ("explain", "--roles", "editor@ss-dev", "--env", "ss-dev", "--tool",
            "deploy_dashboard", "--arg", "dashboard_id=7")
    trusted = _run(*base)
    assert trusted.returncode == 0, trusted.stderr
    assert "context trusted" in trusted.stdout
    assert "decision:      allow (allowed)" in trusted.stdout
    assert "  (none: no p2 line asks for a card here)" in trusted.stdout
    untrusted = _run(*base, "--untrusted")
    assert untrusted.returncode == 0, untrusted.stderr
    assert "decision:      allow_with_confirmation (confirmation_required_untrusted)" in \
        untrusted.stdout
    assert ("context rules for deploy_dashboard in ss-dev, context untrusted:\n"
            "  policy.csv:33: p2, viewer, *, write, untrusted") in untrusted.stdout
    assert "note:" not in untrusted.stdout  # the arguments are a valid call
    env_less = _run("explain", "--roles", "admin@ss-dev,admin@,adm*n", "--tool",
                    "delete_dashboard", "--arg", "dashboard_id=5")
    assert env_less.returncode == 1
    assert "ignored roles (as in a token): admin@, adm*n" in env_less.stdout
    assert "decision:      deny (invalid_arguments)" in env_less.stdout
    assert "detail:        delete_dashboard needs its environment argument 'env_id'" in \
        env_less.stdout
    named = _run("explain", "--roles", "viewer@prod", "--tool", "get_dashboard", "--arg",
                 "dashboard_id=5")
    assert named.returncode == 0, named.stdout
    assert "policy.csv:15: p, viewer, *, get_dashboard, allow" in named.stdout


def test_token_cache_hits_until_expiry_and_never_caches_failures(
        settings: SharedSettings, issuer: DevUserIssuer) -> None:
    cache = CachedVerifier(user_verifier(settings), ttl_s=60, max_size=100)
    token = issuer.mint("carol")
    assert cache.verify(token).sub == cache.verify(token).sub == "carol"
    assert (cache.hits, cache.misses) == (1, 1)
    short = issuer.mint("carol", lifetime_s=1)
    cache.verify(short)
    time.sleep(1.2)
    cache.verify(short)  # exp passed: verified again (leeway still accepts it)
    assert cache.misses == 3
    bad = issuer.mint("carol", extra={"aud": "other"})
    for _ in range(2):
        with pytest.raises(TokenError):
            cache.verify(bad)
    assert cache.misses == 5 and cache.hits == 1
