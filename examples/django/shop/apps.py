from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    from examples.django.shop.queueing import Jobs


class ShopConfig(AppConfig):
    name = "examples.django.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"
    _jobs: Jobs | None = None

    @property
    def jobs(self) -> Jobs:
        """The process's producer and outbox, made when first used (not at start-up:
        ``manage.py migrate`` needs no Kafka). A test sets its own."""
        if self._jobs is None:
            from examples.django.shop.queueing import from_environment

            self._jobs = from_environment()
        return self._jobs

    @jobs.setter
    def jobs(self, jobs: Jobs | None) -> None:
        self._jobs = jobs
