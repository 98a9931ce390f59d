"""`agentchat policy serve | test | explain | matrix | diff | replay`: the sidecar and the
platform team's tools (policy/README.md, "Reviewing a policy edit")."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any


def _settings(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from agentchat.settings import refusals

    from .settings import PolicySettings

    overrides: dict[str, Any] = {}
    if getattr(args, "policy_dir", None):
        overrides["policy_dir"] = Path(args.policy_dir)
    if getattr(args, "tests_dir", None):
        overrides["policy_tests_dir"] = Path(args.tests_dir)
    if getattr(args, "catalog", None):
        overrides["catalog_path"] = Path(args.catalog)
    try:
        return PolicySettings(**overrides)
    except ValidationError as e:
        # One line per refusal, never the input (the environment may hold secrets).
        reasons = refusals(PolicySettings, e.errors())
        print(f"agentchat policy: refusing to start: {reasons}", file=sys.stderr)
        raise SystemExit(2) from None


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from agentchat.settings import report_unknown_env

    from .app import create_app
    from .settings import PolicySettings

    # A warning per AGENTCHAT_* variable nobody reads, before the settings may refuse.
    report_unknown_env(PolicySettings)
    settings = _settings(args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host=args.host or settings.policy_host,
                port=args.port or settings.policy_port, access_log=False,
                log_level="warning", lifespan="on")
    return 0


def _cmd_test(args: argparse.Namespace) -> int:
    from .reload import ReloadError, build_snapshot

    settings = _settings(args)
    folder = Path(args.dir) if args.dir else settings.policy_dir
    # A folder given on the command line brings its own tests/ unless --tests-dir says
    # otherwise; without one, the sidecar's settings (AGENTCHAT_POLICY_TESTS_DIR) apply.
    tests_dir = (Path(args.tests_dir) if args.tests_dir else None) if args.dir \
        else settings.policy_tests_dir
    try:
        snapshot, report = build_snapshot(folder, settings.catalog_path, tests_dir)
    except ReloadError as e:
        print(f"policy {folder} does not load:\n{e}", file=sys.stderr)
        return 2
    if not snapshot.source.tests:
        print(f"warning: {tests_dir or folder / 'tests'} holds no *.yaml policy tests",
              file=sys.stderr)
    source = snapshot.source
    print(f"policy {folder} (revision {snapshot.revision}, {len(source.rules)} rules, "
          f"{len(source.context_rules)} context rules)")
    print(report.summary())
    return 0 if report.ok else 1


def _cmd_explain(args: argparse.Namespace) -> int:
    from agentchat.errors import TokenError

    from .engine import CheckRequest, decide
    from .reload import ReloadError, build_snapshot

    settings = _settings(args)
    try:
        snapshot, _ = build_snapshot(settings.policy_dir, settings.catalog_path,
                                     settings.policy_tests_dir)
        roles, who = _explained_roles(args, settings, snapshot.environment_set)
    except (TokenError, ReloadError) as e:
        print(e.detail, file=sys.stderr)
        return 2
    arguments = _explained_arguments(args, snapshot)
    request = CheckRequest("explain", args.env, args.tool, arguments, untrusted=args.untrusted)
    decision = decide(snapshot, roles, request, check_schema=False)
    role_text = ",".join(r if e is None else f"{r}@{e}" for r, e in roles) or "(none)"
    print(f"user {who}, roles {role_text}; env {args.env or '(none)'}, tool {args.tool}, "
          f"context {request.context}")
    print(f"policy revision {snapshot.revision} from {settings.policy_dir}")
    _print_decision(decision, snapshot.tools.get(args.tool), arguments)
    _print_matched_rules(args, snapshot, roles, decision, arguments, request.context)
    return 0 if decision.allow else 1


def _explained_roles(args: argparse.Namespace, settings: Any,
                     envs: Any) -> tuple[Any, str]:
    """The roles (and who holds them) from a verified --token, or from --roles as a token's."""
    from agentchat.identity import parse_roles, user_verifier

    if args.token:
        principal = user_verifier(settings, environments=envs).verify(args.token)
        return principal.roles, principal.sub
    given = [r for r in (args.roles or "").split(",") if r]
    roles = parse_roles(given, envs, quiet=True)
    ignored = [r for r in given
               if (r.partition("@")[0], r.partition("@")[2] or None) not in roles]
    if ignored:
        print(f"ignored roles (as in a token): {', '.join(ignored)}")
    return roles, "-"


def _explained_arguments(args: argparse.Namespace, snapshot: Any) -> dict[str, Any]:
    """--arg key=value (JSON values allowed); --env fills the tool's environment argument."""
    arguments: dict[str, Any] = {}
    for item in args.arg or []:
        key, _, value = item.partition("=")
        try:
            arguments[key] = json.loads(value)
        except ValueError:
            arguments[key] = value
    tool = snapshot.tools.get(args.tool)
    if tool is not None and tool.environment is not None and args.env:
        arguments.setdefault(tool.environment.argument, args.env)
    return arguments


def _print_decision(decision: Any, tool: Any, arguments: dict[str, Any]) -> None:
    from agentchat.tool_request import InvalidArguments, validate_arguments

    print(f"decision:      {decision.decision} ({decision.reason_code})")
    if decision.detail:
        print(f"detail:        {decision.detail}")
    if tool is not None:
        try:
            validate_arguments(tool, arguments)
        except InvalidArguments as e:  # explain checks the policy; a real call would fail here
            print(f"note:          a real call with these arguments would be refused: {e}")
    print(f"risk:          {decision.risk} / {decision.risk_level}"
          f"{', dangerous' if decision.dangerous else ''}"
          f"{', needs a card' if decision.confirmation_required else ''}")
    print(f"required role: {decision.required_role or '-'}")
    approval = decision.approval
    if approval is not None:
        who = (f" by one of {', '.join(approval['approvers'])}, quorum {approval['quorum']}"
               f" (approvals.yaml rule {approval['rule']})"
               if approval["mode"] == "other" else "")
        print(f"approval:      {approval['mode']}{who}")
    alts = ", ".join(a["action"] for a in decision.alternatives or []) or "-"
    print(f"alternatives:  {alts}")


def _print_matched_rules(args: argparse.Namespace, snapshot: Any, roles: Any, decision: Any,
                         arguments: dict[str, Any], context: str) -> None:
    """The p lines that grant the call (and its source, for a migration), then the p2 lines
    that ask for a card in this context."""
    from .rules import SOURCE_OBJECT
    from .snapshot import ANY_DOMAIN

    domain = decision.env_context or ANY_DOMAIN
    tool = snapshot.tools.get(args.tool)
    checks = [(domain, args.tool)]
    if tool is not None and tool.environment and tool.environment.source_argument:
        source = arguments.get(tool.environment.source_argument)
        checks.append((source if isinstance(source, str) else ANY_DOMAIN, SOURCE_OBJECT))
    for dom, obj in checks:
        rules = snapshot.matching_rules(roles, dom, obj)
        print(f"matched rules for {obj} in {dom}:")
        for rule in rules or []:
            print(f"  policy.csv:{rule.line_no}: {rule.text()}")
        if not rules:
            print("  (none: no line grants any of these roles this in this environment)")
    context_rules = snapshot.matching_context_rules(roles, domain, args.tool, context)
    print(f"context rules for {args.tool} in {domain}, context {context}:")
    for ctx_rule in context_rules:
        print(f"  policy.csv:{ctx_rule.line_no}: {ctx_rule.text()}")
    if not context_rules:
        print("  (none: no p2 line asks for a card here)")


def _load(folder: Path, catalog: Path, label: str) -> Any:
    """A compiled snapshot, or None after saying on stderr why the folder does not load."""
    from .reload import ReloadError, build_snapshot

    try:
        return build_snapshot(folder, catalog)[0]
    except ReloadError as e:
        print(f"{label} policy {folder} does not load:\n{e}", file=sys.stderr)
        return None


def _claims(values: list[str] | None) -> list[tuple[str, ...]]:
    return [tuple(r for r in v.split(",") if r) for v in values or []]


def _emit(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _cmd_matrix(args: argparse.Namespace) -> int:
    from .matrix import build_matrix, policy_roles, principals, render

    settings = _settings(args)
    folder = Path(args.dir) if args.dir else settings.policy_dir
    snapshot = _load(folder, settings.catalog_path, "the")
    if snapshot is None:
        return 2
    who = principals(policy_roles(snapshot), snapshot.environments, _claims(args.principal))
    _emit(render(snapshot, build_matrix(snapshot, who), args.format), args.output)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from .diff import GitError, diff_policies, git_sides, to_json, to_markdown

    settings = _settings(args)
    base = Path(args.catalog) if args.catalog else settings.catalog_path
    old_catalog = Path(args.old_catalog) if args.old_catalog else base
    new_catalog = Path(args.new_catalog) if args.new_catalog else base
    if args.git:
        if len(args.sides) != 1:
            print("policy diff --git REV1..REV2 PATH: give one policy folder path",
                  file=sys.stderr)
            return 2
        try:
            old_dir, new_dir, old_cat, new_cat = git_sides(
                args.git, Path(args.sides[0]),
                Path(args.git_catalog) if args.git_catalog else None)
        except GitError as e:
            print(f"policy diff: {e.detail}", file=sys.stderr)
            return 2
        old_catalog, new_catalog = old_cat or old_catalog, new_cat or new_catalog
        rev_old, _, rev_new = args.git.partition("..")
        labels = (f"{rev_old or 'HEAD'}:{args.sides[0]}", f"{rev_new or 'HEAD'}:{args.sides[0]}")
    elif len(args.sides) == 2:
        old_dir, new_dir = Path(args.sides[0]), Path(args.sides[1])
        labels = (str(old_dir), str(new_dir))
    else:
        print("policy diff OLD_DIR NEW_DIR (or --git REV1..REV2 PATH)", file=sys.stderr)
        return 2
    old = _load(old_dir, old_catalog, "the old")
    new = _load(new_dir, new_catalog, "the new")
    if old is None or new is None:
        return 2
    result = diff_policies(old, new, _claims(args.principal), labels)
    _emit(to_json(result) if args.format == "json" else to_markdown(result), args.output)
    return 1 if result.changed else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from .replay import ReplayError, ReplayReport, parse_duration, read_records, replay, to_markdown

    settings = _settings(args)
    if args.log is None and args.since is None:
        print("policy replay: give --log FILE (or -) and/or --since DURATION", file=sys.stderr)
        return 2
    try:
        since = datetime.now(UTC) - parse_duration(args.since) if args.since else None
    except ReplayError as e:
        print(f"policy replay: {e}", file=sys.stderr)
        return 2
    log_path = args.log or settings.policy_decision_log_path
    if log_path is None:
        print("policy replay --since reads AGENTCHAT_POLICY_DECISION_LOG_PATH, which is unset; "
              "give --log FILE (or - for stdin, e.g. from kubectl logs)", file=sys.stderr)
        return 2
    folder = Path(args.dir)
    snapshot = _load(folder, settings.catalog_path, "the")
    if snapshot is None:
        return 2
    report = ReplayReport(snapshot.revision)
    try:
        if str(log_path) == "-":
            records = read_records(sys.stdin.buffer, since, report)
        else:
            with open(log_path, "rb") as f:
                records = read_records(f, since, report)
    except OSError as e:
        print(f"policy replay: cannot read {log_path}: {e.strerror}", file=sys.stderr)
        return 2
    replay(snapshot, records, report)
    if args.format == "json":
        import orjson

        text = orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode()
    else:
        text = to_markdown(report, str(folder))
    _emit(text, args.output)
    return 1 if report.flips else 0


def register(subparsers: Any) -> None:
    policy = subparsers.add_parser("policy", help="the policy sidecar and its tools")
    sub = policy.add_subparsers(dest="policy_command", required=True)

    serve = sub.add_parser("serve", help="run the sidecar (127.0.0.1:8181)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--policy-dir", help="overrides AGENTCHAT_POLICY_DIR")
    serve.add_argument("--tests-dir", help="overrides AGENTCHAT_POLICY_TESTS_DIR")
    serve.set_defaults(func=_cmd_serve)

    test = sub.add_parser("test", help="run a policy folder's tests/*.yaml (exit 1 on failure)")
    test.add_argument("dir", nargs="?", help="policy folder (default: AGENTCHAT_POLICY_DIR)")
    test.add_argument("--tests-dir", help="the tests' own folder (default: DIR/tests; without "
                                          "DIR, AGENTCHAT_POLICY_TESTS_DIR)")
    test.add_argument("--catalog", help="overrides AGENTCHAT_CATALOG_PATH")
    test.set_defaults(func=_cmd_test)

    explain = sub.add_parser("explain", help="why a user may or may not run a tool")
    who = explain.add_mutually_exclusive_group(required=True)
    who.add_argument("--roles", help="comma-separated roles as in the JWT (role or role@env)")
    who.add_argument("--token", help="a user JWT (verified) whose roles to use")
    explain.add_argument("--env", help="the target environment (omit for an env-less call)")
    explain.add_argument("--tool", required=True)
    explain.add_argument("--arg", action="append", help="key=value (JSON values allowed)")
    explain.add_argument("--untrusted", action="store_true",
                         help="the request's context is untrusted (ss-tools output in the turn)")
    explain.add_argument("--policy-dir", help="overrides AGENTCHAT_POLICY_DIR")
    explain.add_argument("--catalog", help="overrides AGENTCHAT_CATALOG_PATH")
    explain.set_defaults(func=_cmd_explain)

    matrix = sub.add_parser("matrix", help="every principal x tool x environment x context "
                                           "decision of a policy")
    matrix.add_argument("dir", nargs="?", help="policy folder (default: AGENTCHAT_POLICY_DIR)")
    matrix.add_argument("--catalog", help="overrides AGENTCHAT_CATALOG_PATH")
    matrix.add_argument("--format", choices=("md", "csv", "json"), default="md")
    matrix.add_argument("--principal", action="append", metavar="ROLES",
                        help="an extra principal: comma-separated roles as in a token "
                             "(e.g. editor@ss-dev,viewer@prod); repeatable")
    matrix.add_argument("--output", "-o", help="write to this file instead of stdout")
    matrix.set_defaults(func=_cmd_matrix)

    diff = sub.add_parser("diff", help="the decisions a policy change changes (exit 0 none, "
                                       "1 some, 2 a side does not load)")
    diff.add_argument("sides", nargs="*", metavar="DIR",
                      help="OLD_DIR NEW_DIR, or the policy folder's path with --git")
    diff.add_argument("--git", metavar="REV1..REV2",
                      help="compare the folder as it is at two git revisions")
    diff.add_argument("--catalog", help="the catalog of both sides (default: "
                                        "AGENTCHAT_CATALOG_PATH)")
    diff.add_argument("--old-catalog", help="the old side's catalog")
    diff.add_argument("--new-catalog", help="the new side's catalog")
    diff.add_argument("--git-catalog", metavar="PATH",
                      help="with --git: read the catalog from the same two revisions")
    diff.add_argument("--format", choices=("md", "json"), default="md")
    diff.add_argument("--principal", action="append", metavar="ROLES",
                      help="an extra principal (comma-separated roles); repeatable")
    diff.add_argument("--output", "-o", help="write to this file instead of stdout")
    diff.set_defaults(func=_cmd_diff)

    rep = sub.add_parser("replay", help="re-decide a decision log with another policy "
                                        "(exit 1 when any decision flips)")
    rep.add_argument("dir", help="the policy folder to replay with")
    rep.add_argument("--catalog", help="overrides AGENTCHAT_CATALOG_PATH")
    rep.add_argument("--log", help="a decision log (JSON lines; - for stdin); default: "
                                   "AGENTCHAT_POLICY_DECISION_LOG_PATH")
    rep.add_argument("--since", metavar="DURATION",
                     help="only decisions this recent: 90s, 15m, 24h, 7d, 1h30m")
    rep.add_argument("--format", choices=("md", "json"), default="md")
    rep.add_argument("--output", "-o", help="write to this file instead of stdout")
    rep.set_defaults(func=_cmd_replay)
