"""``manage.py agent_connections``: add, list, remove connections; re-encrypt their keys."""

from __future__ import annotations

import getpass
import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.catalog import connections
from nrllm_agents.crypto.vault import VaultError
from nrllm_agents.management import console
from nrllm_agents.models import Connection, ConnectionKind


class Command(BaseCommand):
    help = (
        "Manage connections (model servers with their API key). The key is read from standard input, "
        "never from the command line, and is never shown."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        add = sub.add_parser("add", help="Add a connection; its API key is read from stdin (empty: no key).")
        add.add_argument("name", metavar="NAME", help="The connection's name (letters, digits, - and _).")
        add.add_argument("--kind", required=True, choices=ConnectionKind.values, help="The protocol it speaks.")
        add.add_argument("--base-url", required=True, metavar="URL", help="The server's base URL (the key goes there).")
        add.add_argument("--model", default="", metavar="M", help="The model runs use when they name none.")
        add.add_argument("--replace", action="store_true", help="Replace a connection of that name (and its key).")
        listing = sub.add_parser("list", help="List connections (never their keys).")
        listing.add_argument("--json", action="store_true", help="Print one JSON object per line.")
        remove = sub.add_parser("remove", help="Remove a connection and its prices.")
        remove.add_argument("name", metavar="NAME")
        sub.add_parser("rotate", help="Re-encrypt every stored key with the first of NRLLM_SECRET_KEYS.")

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['action']}")(options)

    def _add(self, options: dict[str, Any]) -> None:
        key = self._read_key()
        try:
            row, created = connections.save(
                options["name"],
                kind=options["kind"],
                base_url=options["base_url"],
                default_model=options["model"],
                api_key=key,
                replace=options["replace"],
            )
        except connections.InvalidConnection as exc:
            raise console.usage_error(f"invalid connection: {exc}".replace("\n", " ")) from None
        except VaultError as exc:
            raise CommandError(str(exc), returncode=console.EXIT_FAILED) from None
        verb = "added" if created else "replaced"
        note = "with a key" if row.has_key else "without a key"
        self.stdout.write(self.style.SUCCESS(f"connection {row.name} {verb} ({row.kind}, {note})"))

    def _read_key(self) -> str:
        if sys.stdin.isatty():
            return getpass.getpass("API key (empty: none): ")
        return sys.stdin.readline().strip()

    def _list(self, options: dict[str, Any]) -> None:
        for row in Connection.objects.all():
            data = connections.public_dict(row)
            if options["json"]:
                self.stdout.write(json.dumps(data))
                continue
            key = "key set" if row.has_key else "no key"
            model = row.default_model or "(no default model)"
            self.stdout.write(f"{row.name}\t{row.kind}\t{connections.shown_url(row)}\t{model}\t{key}")

    def _remove(self, options: dict[str, Any]) -> None:
        if not connections.remove(options["name"]):
            raise CommandError(f"no connection named {options['name']!r}", returncode=console.EXIT_FAILED)
        self.stdout.write(self.style.SUCCESS(f"connection {options['name']} removed"))

    def _rotate(self, options: dict[str, Any]) -> None:
        try:
            count = connections.rotate()
        except VaultError as exc:
            raise CommandError(f"{exc}; nothing was changed", returncode=console.EXIT_FAILED) from None
        self.stdout.write(self.style.SUCCESS(f"{count} key(s) re-encrypted with the first of NRLLM_SECRET_KEYS"))
