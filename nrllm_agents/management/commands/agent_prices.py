"""``manage.py agent_prices``: set and list model prices (per million tokens)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from nrllm_agents.conf import app_settings
from nrllm_agents.domain.steps import decimal_text
from nrllm_agents.management import console
from nrllm_agents.models import Connection, Price
from nrllm_agents.money import parsing, pricing


def _amount(flag: str, value: str) -> Decimal:
    try:
        return parsing.parse(value, parsing.PRICE)
    except parsing.InvalidAmount as exc:
        raise console.usage_error(f"{flag}: {exc}") from None


class Command(BaseCommand):
    help = (
        "Set or list what models cost, per million input and output tokens, through a connection or a "
        "provider. A new price applies to model calls from the next segment on; recorded costs never change."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        put = sub.add_parser("set", help="Set (create or change) a model's price.")
        where = put.add_mutually_exclusive_group(required=True)
        where.add_argument("--connection", metavar="NAME", help="The price through this connection.")
        where.add_argument(
            "--provider", metavar="NAME", help="The price through this provider (environment-configured)."
        )
        put.add_argument("--model", required=True, metavar="MODEL", help="The model's name, as runs name it.")
        put.add_argument("--input", required=True, metavar="X", help="Price per million input (prompt) tokens.")
        put.add_argument("--output", required=True, metavar="Y", help="Price per million output (completion) tokens.")
        listing = sub.add_parser("list", help="List the prices.")
        listing.add_argument("--json", action="store_true", help="Print one JSON object per line.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "set":
            self._set(options)
        else:
            self._list(options)

    def _set(self, options: dict[str, Any]) -> None:
        model = options["model"].strip()
        if not model or len(model) > 200 or not model.isprintable():
            raise console.usage_error("--model: a printable name of at most 200 characters")
        connection = None
        if options["connection"] is not None:
            connection = Connection.objects.filter(name=options["connection"]).first()
            if connection is None:
                raise console.usage_error(f"--connection: no connection named {options['connection']!r}")
        provider = (options["provider"] or "").strip()
        if connection is None and (not provider or len(provider) > 64 or not provider.isprintable()):
            raise console.usage_error("--provider: a printable name of at most 64 characters")
        row, created = pricing.set_price(
            model=model,
            input_per_million=_amount("--input", options["input"]),
            output_per_million=_amount("--output", options["output"]),
            connection=connection,
            provider=provider,
        )
        self.stdout.write(self.style.SUCCESS(f"price {'set' if created else 'changed'}: {row}"))

    def _list(self, options: dict[str, Any]) -> None:
        for row in Price.objects.select_related("connection"):
            data = {
                "connection": row.connection.name if row.connection else None,
                "provider": row.provider or None,
                "model": row.model,
                "input_per_million": decimal_text(row.input_per_million.normalize()),
                "output_per_million": decimal_text(row.output_per_million.normalize()),
                "currency": app_settings.CURRENCY,
            }
            where = f"connection {data['connection']}" if row.connection_id else f"provider {row.provider}"
            line = (
                f"{row.model} via {where}: {data['input_per_million']} in / {data['output_per_million']} out "
                f"{data['currency']} per 1M tokens"  # every amount printed carries its currency
            )
            self.stdout.write(json.dumps(data) if options["json"] else line)
