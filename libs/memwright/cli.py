"""The `memwright` command: one entry point for every service and tool."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys

from memwright.settings import SettingsError

SERVICES = ("ingest", "sweeper", "curator", "indexer", "api")


def _migrate(_: argparse.Namespace) -> int:
    from memwright.settings import PostgresSettings
    from memwright.store.migrate import migrate

    settings = PostgresSettings.from_env()
    applied = asyncio.run(migrate(settings.pg_dsn))
    print(f"applied migrations {applied}" if applied else "schema is up to date")
    return 0


def _topics(_: argparse.Namespace) -> int:
    from memwright.settings import KafkaSettings
    from memwright.topics import ensure_topics

    created = asyncio.run(ensure_topics(KafkaSettings.from_env()))
    print(f"created topics {created}" if created else "topics exist")
    return 0


def _token(args: argparse.Namespace) -> int:
    import os

    from memwright.auth import mint
    from memwright.settings import PREFIX, AuthSettings

    if args.private_key:  # RS256: the services verify it with the JWKS file that holds the public half
        settings = AuthSettings(
            jwt_private_key_file=args.private_key,
            jwt_kid=args.kid,
            jwt_issuer=os.environ.get(f"{PREFIX}JWT_ISSUER") or "memwright",
            jwt_audience=os.environ.get(f"{PREFIX}JWT_AUDIENCE") or "memwright",
        )
    else:
        settings = AuthSettings.from_env()
    print(mint(settings, args.subject, args.scope, args.ttl))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from memwright.demo import run_demo

    return asyncio.run(run_demo(window_seconds=args.window))


def _mcp(args: argparse.Namespace) -> int:
    from memwright.services.api import mcp_server

    mcp_server.main(http=args.http)
    return 0


# ---- memwright hook session-start | user-prompt (harness hooks; memwright.adapters.hooks) ----
def _hook(args: argparse.Namespace) -> int:
    from memwright.adapters.hooks import run

    return run(args.event, with_context=args.context)


def _add_hook_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hook = sub.add_parser(
        "hook",
        help="harness hooks (Claude Code): print the start-of-turn block, send the user's prompt to ingest",
        description="Configured from MEMWRIGHT_TOKEN, MEMWRIGHT_API_URL, MEMWRIGHT_INGEST_URL (MEMWRIGHT_USER_ID, "
        "MEMWRIGHT_CONVERSATION_ID, MEMWRIGHT_HOOK_TIMEOUT_S); exit 0 also when memwright is unreachable "
        "(a note on stderr), 1 on a configuration mistake. See docs/integrations.md.",
    )
    hook.add_argument("event", choices=["session-start", "user-prompt"], help="which hook runs")
    hook.add_argument("--context", action="store_true", help="user-prompt: also print the fresh block")


# ---- end of memwright hook ----


def _service(name: str) -> int:
    importlib.import_module(f"memwright.services.{name}.app").main()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memwright", description="Per-user long-term memory for LLM agents.")
    sub = p.add_subparsers(dest="command", required=True)
    for name in SERVICES:
        sub.add_parser(name, help=f"run the {name} service (configured from MEMWRIGHT_* variables)")
    mcp = sub.add_parser("mcp", help="run the MCP server: stdio for the user of MEMWRIGHT_TOKEN (docs/mcp.md)")
    mcp.add_argument("--http", action="store_true", help="serve stateless Streamable HTTP at /mcp (any user's token)")
    sub.add_parser("migrate", help="apply PostgreSQL migrations (MEMWRIGHT_PG_DSN)")
    sub.add_parser("topics", help="create the Kafka topics (MEMWRIGHT_KAFKA_BOOTSTRAP)")
    demo = sub.add_parser("demo", help="run the whole pipeline on the local stack with a demo stream")
    demo.add_argument("--window", type=float, default=3.0, help="sweep window in seconds (default 3)")
    sub.add_parser("eval", help="measure memory quality on the labelled eval set (--help for options)", add_help=False)
    token = sub.add_parser("token", help="mint a bearer token for local use (MEMWRIGHT_JWT_SECRET)")
    token.add_argument("subject", help="a user id, or service:<name> for a service token")
    token.add_argument("--scope", nargs="+", default=["memories:read"], help="scopes to grant")
    token.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds")
    token.add_argument("--private-key", help="sign RS256 with this PEM private key instead of HS256 with the secret")
    token.add_argument("--kid", default="", help="key id to put in an RS256 token's header (the key's kid in the JWKS)")
    _add_hook_parser(sub)
    index = sub.add_parser("index", help="vector index tools")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    index_sub.add_parser("rebuild", help="rebuild the Qdrant collection from PostgreSQL", add_help=False)
    index_sub.add_parser("check", help="compare PostgreSQL and Qdrant; exit 1 on drift", add_help=False)
    return p


def _eval(rest: list[str]) -> int:
    from memwright.eval import main as eval_main

    return eval_main(rest)


def main(argv: list[str] | None = None) -> None:
    # eval and index take their own options, parsed by their modules
    args, rest = parser().parse_known_args(argv)
    if rest and args.command not in ("eval", "index"):
        parser().error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command in SERVICES:
            code = _service(args.command)
        elif args.command == "eval":
            code = _eval(rest)
        elif args.command == "mcp":
            code = _mcp(args)
        elif args.command == "index":
            from memwright.index.admin import main as index_main

            code = index_main(args.index_command, rest)
        else:
            commands = {"migrate": _migrate, "topics": _topics, "token": _token, "demo": _demo, "hook": _hook}
            code = commands[args.command](args)
    except SettingsError as exc:
        print(f"memwright {args.command}: {exc}", file=sys.stderr)
        code = 2
    except ValueError as exc:
        print(f"memwright {args.command}: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)
