from __future__ import annotations

from typing import ClassVar

from django.db import migrations, models
from django.db.migrations.operations.base import Operation


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Operation]] = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False)),
                ("tenant", models.CharField(max_length=100)),
                ("email", models.CharField(max_length=254)),
                ("amount_cents", models.BigIntegerField()),
                ("receipt_job", models.CharField(blank=True, max_length=32)),
            ],
        ),
    ]
