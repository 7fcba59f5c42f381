"""Settings: PostgreSQL when ``PGDATABASE`` is set (the outbox needs it), else SQLite
(the tests, which stage through eager mode's outbox)."""

from __future__ import annotations

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["examples.django.shop.apps.ShopConfig"]
MIDDLEWARE: list[str] = []

if os.environ.get("PGDATABASE"):
    # psycopg 3: Django's connection.connection is then a psycopg.Connection, which
    # the outbox stages on (libpq reads PGHOST, PGUSER, PGPASSWORD and the rest).
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.postgresql", "NAME": os.environ["PGDATABASE"]}
    }
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}

# The queue the shop's jobs go to; ``KAFKA_BOOTSTRAP`` says where Kafka is.
JOBS_QUEUE = "emails"
