"""`python -m agentchat.sandbox [--host H] [--port P]`: the sandbox without the other
components' sub-commands (handy for an image that ships only the sandbox)."""

from __future__ import annotations

import argparse
import sys

from agentchat.sandbox.cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentchat.sandbox")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["sandbox", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
