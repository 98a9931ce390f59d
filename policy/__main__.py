"""`python -m agentchat.policy serve|test|explain|matrix|diff|replay`: the sidecar without the
other components' sub-commands (an image that ships only the sidecar)."""

from __future__ import annotations

import argparse
import sys

from agentchat.policy.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentchat.policy")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["policy", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
