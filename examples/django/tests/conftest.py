"""Django set up for the tests: the project's settings (SQLite in memory) and its
test database, made once for the session, as Django's test runner makes it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import django
import pytest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django.shop.settings")
django.setup()


@pytest.fixture(scope="session", autouse=True)
def django_test_database() -> Iterator[None]:
    from django.test.runner import DiscoverRunner
    from django.test.utils import setup_test_environment, teardown_test_environment

    setup_test_environment()
    runner = DiscoverRunner(verbosity=0, interactive=False)
    databases = runner.setup_databases()
    try:
        yield
    finally:
        runner.teardown_databases(databases)
        teardown_test_environment()
