"""A realistic synthetic policy and random requests, for the agreement tests and benchmarks.

50 roles per environment, role hierarchies 3 levels deep, about 2,000 lines, some denies, on
top of the shipped viewer/editor/admin lines; seeded, so a failure can be replayed. About 5% of
the lines are explicit env-less lines (`p, role, *, <tool>, allow|deny`: what admits a role
held in one environment in domain `*`) and about 5% context rules (`p2, role, env|*, obj,
untrusted`); random requests mix roles held everywhere and `role@env`, in every domain.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from agentchat.catalog import Catalog
from agentchat.policy.rules import MODEL_FILE, RISK_GROUPS, SOURCE_OBJECT
from agentchat.policy.snapshot import ANY_DOMAIN, Roles
from agentchat.settings import PACKAGE_DATA

SHIPPED_POLICY = PACKAGE_DATA / "policy"


def synthetic_lines(catalog: Catalog, *, roles_per_env: int = 50, lines_per_role: int = 13,
                    seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    objects = [*catalog.names, *RISK_GROUPS, "*"]
    env_less = [t.name for t in catalog.tools if t.environment is None]
    lines = [
        "g, editor, viewer", "g, admin, editor",
        "p, viewer, *, read, allow", "p, admin, *, destructive, allow",
        *(f"p, editor, {env}, write, allow" for env in catalog.environments),
        *(f"p, viewer, *, {tool}, allow" for tool in env_less),
        "p2, viewer, *, write, untrusted",
    ]
    for env in catalog.environments:
        names = [f"{env}.team{i}" for i in range(roles_per_env)]
        for i, name in enumerate(names):
            # Chains of four roles: each inherits the one before, so hierarchies are 3 deep.
            if i % 4:
                lines.append(f"g, {name}, {names[i - 1]}")
            if i % 10 == 0:
                lines.append(f"g, {name}, viewer")
            for _ in range(lines_per_role):
                kind = rng.random()
                dom = env if rng.random() < 0.85 else rng.choice([*catalog.environments, "*"])
                obj = rng.choice(objects[:-1]) if rng.random() < 0.97 else "*"
                if kind < 0.05:  # a context rule: this call needs a card when untrusted
                    lines.append(f"p2, {name}, {dom}, {obj}, untrusted")
                    continue
                eft = "deny" if rng.random() < 0.08 else "allow"
                if kind < 0.10:  # an explicit env-less line, naming the tool itself
                    lines.append(f"p, {name}, *, {rng.choice(catalog.names)}, {eft}")
                    continue
                lines.append(f"p, {name}, {dom}, {obj}, {eft}")
    return lines


def write_synthetic(folder: Path, catalog: Catalog, **kwargs: int) -> int:
    """Write a synthetic policy folder (the shipped model, no tests); returns its line count."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SHIPPED_POLICY / MODEL_FILE, folder / MODEL_FILE)
    lines = synthetic_lines(catalog, **kwargs)
    (folder / "policy.csv").write_text("\n".join(lines) + "\n")
    return len(lines)


def random_requests(catalog: Catalog, n: int, *, roles_per_env: int = 50,
                    seed: int = 11) -> list[tuple[Roles, str, str]]:
    """(roles, domain, object) triples spread over every role, domain and object."""
    rng = random.Random(seed)
    role_names = ["viewer", "editor", "admin", "nobody",
                  *(f"{env}.team{i}" for env in catalog.environments
                    for i in range(roles_per_env))]
    envs: list[str | None] = [None, *catalog.environments]
    domains = [*catalog.environments, ANY_DOMAIN]
    objects = [*catalog.names, SOURCE_OBJECT]
    out = []
    for _ in range(n):
        roles = tuple((rng.choice(role_names), rng.choice(envs))
                      for _ in range(rng.randint(1, 3)))
        out.append((roles, rng.choice(domains), rng.choice(objects)))
    return out
