"""``manage.py runworker [WORKER OPTIONS]``: run the shop's handlers, as ``workers run``.

The options after the command are ``workers run``'s (``--concurrency 8``,
``--processes 2``, ``--grace 1m``); the app and the queue are the shop's. The
worker runs inside Django's set-up process, so a handler may use the ORM (with
``--processes`` above 1, each child imports the app module itself: call
``django.setup()`` at its top then).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

APP = "examples.django.shop.jobs:app"


def worker_argv(extra: list[str]) -> list[str]:
    return ["run", APP, "--queue", settings.JOBS_QUEUE, *extra]


class Command(BaseCommand):
    help = "Run the shop's job handlers (options: those of `workers run`)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("worker_options", nargs=argparse.REMAINDER)

    def handle(self, *args: Any, **options: Any) -> None:
        from workers.cli import main

        main(worker_argv(list(options["worker_options"])), standalone_mode=True)
