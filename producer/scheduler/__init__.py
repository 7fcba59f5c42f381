"""Cron for the job queue: entries fired by one leader among many schedulers.

Leadership comes from Kafka group membership, last fires live in a compacted
topic, and every fire carries the dedupe key ``name@fire_time``. See
``docs/scheduling.md``.
"""

from producer.scheduler.config import CronConfig, load_config, parse_config
from producer.scheduler.entry import CronConfigError, CronEntry, MisfirePolicy, dedupe_key
from producer.scheduler.options import SchedulerOptions
from producer.scheduler.service import Scheduler
from producer.scheduler.timing import CronSchedule

__all__ = [
    "CronConfig",
    "CronConfigError",
    "CronEntry",
    "CronSchedule",
    "MisfirePolicy",
    "Scheduler",
    "SchedulerOptions",
    "dedupe_key",
    "load_config",
    "parse_config",
]
