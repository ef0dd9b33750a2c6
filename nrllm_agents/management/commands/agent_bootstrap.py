"""``manage.py agent_bootstrap``: first-start setup for the local playground."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.urls import reverse

from ..console import command_line


class Command(BaseCommand):
    help = (
        "Create a local superuser with a random password when none exists, printing the password "
        "once, and print the playground address. With a superuser present it prints no password."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--username", default="admin", help="Name of the superuser created on first start (default: admin)."
        )
        parser.add_argument(
            "--url",
            default="http://127.0.0.1:8000",
            help="Base address the web application is served at, for the printed links.",
        )

    def handle(self, *args: Any, username: str, url: str, **options: Any) -> None:
        User = get_user_model()
        with transaction.atomic():
            if User.objects.filter(is_superuser=True).exists():
                password = None
            elif User.objects.filter(**{User.USERNAME_FIELD: username}).exists():
                raise CommandError(
                    f"A user named {username!r} exists but is not a superuser; "
                    f"choose another --username or run createsuperuser.",
                    returncode=2,
                )
            else:
                password = secrets.token_urlsafe(12)
                User.objects.create_superuser(username=username, email="", password=password)
        base = url.rstrip("/")
        if password is not None:
            self.stdout.write(self.style.SUCCESS(f"Created superuser {username!r}."))
            # Shown once, here only: it is stored hashed and never logged.
            self.stdout.write(f"  password: {password}   (shown once; change it in the admin)")
        # every start says how to set a new one: the password above is shown only the first time
        first = User.objects.filter(is_superuser=True).order_by("pk").first()
        name = first.get_username() if first is not None else username
        self.stdout.write(f"Lost the password of {name!r}? {command_line('changepassword', name)} sets a new one.")
        self.stdout.write(self.style.SUCCESS(f"Playground: {base}{reverse('nrllm_web:playground')}"))
        self.stdout.write(f"Admin:      {base}{reverse('admin:index')}")
