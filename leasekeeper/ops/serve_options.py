"""The options of ``leasekeeper serve``: names, defaults and help, in the order
``--help`` lists them.

Defaults come from the configuration types (``EngineConfig``, ``LoopConfig``,
``RetryPolicy``, ``BreakerSettings``, ``ServeConfig``), so the command line and a
Python caller agree; ``serve_cli`` turns what they parse into a ``ServeConfig``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from jobcore.cli_config import config_option
from jobcore.cli_env import (
    priority_classes_option,
    schema_path_option,
    target_option,
    token_option,
    topic_prefix_option,
)
from jobcore.cli_errors import log_level_option
from jobcore.cli_kafka import bootstrap_option, kafka_config_option
from jobcore.cli_registry import schema_registry_options
from jobcore.delay_tiers import DEFAULT_TIERS
from jobcore.durations import DURATION, shown
from jobcore.topic_admin import STATUS_RETENTION_HELP
from leasekeeper.breaker.settings import BreakerSettings
from leasekeeper.core.retry_budget import DEFAULT_MIN_RETRIES, DEFAULT_SHARE
from leasekeeper.core.retry_policy import Jitter, RetryPolicy
from leasekeeper.engine import EngineConfig
from leasekeeper.kafka.consumer_loop import LoopConfig
from leasekeeper.ops.service import ServeConfig
from leasekeeper.ordering.values import OnDead

_ENGINE = EngineConfig()
_LOOP = LoopConfig()
_POLICY = RetryPolicy()
_BREAKERS = BreakerSettings()
_SERVE_FIELDS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ServeConfig)}

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS: list[Callable[[Any], Any]] = [
    config_option,
    click.option("--queue", required=True, help="the queue to serve (topic jobs.QUEUE)"),
    bootstrap_option,
    kafka_config_option,
    topic_prefix_option,
    click.option("--state-dir", type=click.Path(path_type=Path), required=True, help="RocksDB dir"),
    target_option(
        "--listen",
        "listen",
        help_text="unix:PATH or HOST:PORT [default: the queue's own socket in a private directory]",
    ),
    token_option("Shared token every client must present on a TCP listener."),
    click.option(
        "--lease",
        "lease_s",
        type=DURATION,
        default=shown(_ENGINE.lease_s),
        show_default=True,
        help="lease length (30s, 2m)",
    ),
    click.option("--window-records", default=_ENGINE.window_records, show_default=True),
    click.option("--window-bytes", default=_ENGINE.window_bytes, show_default=True),
    click.option(
        "--max-uncommitted",
        type=click.IntRange(min=1),
        default=_ENGINE.max_uncommitted,
        show_default=True,
        help="stop leasing while this many finished jobs are in no commit Kafka accepted "
        "(the group coordinator is down): bounds what a partition move runs again",
    ),
    click.option(
        "--tenant-cap",
        type=int,
        default=None,
        help="skip, at claim time, a tenant already running this many jobs (all workers)",
    ),
    click.option("--tenant-cap-for", multiple=True, metavar="TENANT=N", help="one tenant's cap"),
    click.option(
        "--tenant-weight",
        multiple=True,
        metavar="TENANT=W",
        help="a tenant's weight in weighted fair queuing by handler time (default 1)",
    ),
    click.option(
        "--tenants",
        "tenants_file",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        default=None,
        help="TOML file of tenant weights and caps ([defaults], [tenants.NAME]); flags win",
    ),
    click.option(
        "--overflow-share",
        type=click.FloatRange(min=0.0, max=1.0),
        default=_ENGINE.overflow_share,
        show_default=True,
        help="a tenant holding more than this share of its partition's slice of a full "
        "window moves to the overflow lane (jobs.QUEUE.overflow), e.g. 0.5; 0 leaves the "
        "lane off",
    ),
    click.option(
        "--defer-floods/--no-defer-floods",
        default=_ENGINE.defer_floods,
        show_default=True,
        help="read past a flood: a tenant holding more than half of its partition's slice "
        "of a full window waits in Kafka (its records read again as it drains) while the "
        "partition's other tenants are read on",
    ),
    click.option(
        "--rate-limit",
        multiple=True,
        metavar="TYPE=N/s",
        help="dispatch at most N jobs of TYPE per second (/m, /h) over this queue's "
        "leasekeepers; repeatable. Jobs over it wait, never fail",
    ),
    click.option(
        "--tenant-rate-limit",
        default=None,
        metavar="N/s",
        help="dispatch at most N jobs per second (/m, /h) of every tenant",
    ),
    click.option(
        "--tenant-rate-limit-for",
        multiple=True,
        metavar="TENANT=N/s",
        help="one tenant's rate limit (repeatable; wins over --tenant-rate-limit)",
    ),
    click.option(
        "--group",
        default=None,
        help="consumer group (default JOBS_GROUP, else leasekeeper.jobs.QUEUE); producers "
        "look up its commits to end a flood's diversion, so give them the same JOBS_GROUP",
    ),
    click.option("--group-id", "group_id_alias", default=None, hidden=True),
    schema_path_option("schema_path"),
    schema_registry_options,
    priority_classes_option,
    click.option(
        "--instance-id",
        default=None,
        help="static group membership: restarting with the same id takes the partitions "
        "back at once",
    ),
    click.option(
        "--session-timeout-ms", default=_SERVE_FIELDS["session_timeout_ms"], show_default=True
    ),
    click.option(
        "--lease-for",
        multiple=True,
        metavar="TYPE=DURATION",
        help="lease length for one job type (repeatable), e.g. resize_image=5m",
    ),
    click.option(
        "--drain-grace",
        type=DURATION,
        default=shown(_LOOP.drain_grace_s),
        show_default=True,
        help="how long moving or stopping partitions wait for jobs in flight",
    ),
    click.option("--metrics-port", type=int, default=None, help="serve Prometheus /metrics here"),
    click.option(
        "--ready-target",
        multiple=True,
        metavar="CLASS=DURATION",
        help="how long the oldest ready job of a priority class may wait before the example "
        "alert fires (exported as a metric; defaults critical=1s, default=30s, bulk=10m)",
    ),
    click.option(
        "--retry-tiers",
        default=",".join(DEFAULT_TIERS),
        show_default=True,
        help="delay tiers (topics jobs.QUEUE.retry.<tier>)",
    ),
    click.option(
        "--jitter",
        type=click.Choice([j.value for j in Jitter], case_sensitive=False),
        default=_POLICY.jitter.value,
        show_default=True,
    ),
    click.option(
        "--retry-base",
        type=DURATION,
        default=shown(_POLICY.base_s),
        show_default=True,
        help="backoff base",
    ),
    click.option(
        "--retry-cap",
        type=DURATION,
        default=shown(_POLICY.cap_s),
        show_default=True,
        help="backoff cap",
    ),
    click.option(
        "--retry-budget",
        type=click.FloatRange(min=0, max=1, min_open=True),
        default=DEFAULT_SHARE,
        show_default=True,
        help="share of recent throughput retries may use",
    ),
    click.option(
        "--retry-budget-floor",
        type=click.IntRange(min=1),
        default=DEFAULT_MIN_RETRIES,
        show_default=True,
        help="retries always allowed per 60 s window, however quiet the queue",
    ),
    click.option(
        "--dedupe-window",
        type=DURATION,
        default=shown(_SERVE_FIELDS["dedupe_window_s"]),
        show_default=True,
        help="how long a dedupe key blocks later jobs with the same key (from the first)",
    ),
    click.option(
        "--permanent-error",
        multiple=True,
        help="an exception class name that is never retried (repeatable)",
    ),
    click.option(
        "--reset-state",
        is_flag=True,
        help="when --state-dir belongs to another cluster, group or topic, wipe it "
        "instead of refusing to start",
    ),
    click.option(
        "--unknown-type-grace",
        type=DURATION,
        default=shown(_ENGINE.unknown_type_grace_s),
        show_default=True,
        help="how long a job no connected worker runs waits before it fails as UnknownJobType",
    ),
    click.option("--status-retention", type=DURATION, default=None, help=STATUS_RETENTION_HELP),
    click.option(
        "--no-status",
        is_flag=True,
        help="write no jobs.QUEUE.status records for this queue (give it to every leasekeeper "
        "of the queue): lookups of finished jobs then answer that records are off",
    ),
    click.option(
        "--on-dead",
        type=click.Choice([o.value for o in OnDead]),
        default=OnDead.CONTINUE.value,
        show_default=True,
        help="when an ordered job (ordering key) is dead-lettered: its key's next job runs "
        "(continue), or the key waits until `leasekeeper ordering replay|skip` (block)",
    ),
    click.option(
        "--socket-mode",
        default="0600",
        show_default=True,
        help="permissions of the Unix socket; 0660 shares it with the group",
    ),
    click.option(
        "--insecure",
        is_flag=True,
        help="listen on loopback TCP without a token (any local user can connect)",
    ),
    click.option(
        "--tls-cert",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        help="TLS certificate (PEM) for a TCP listener",
    ),
    click.option(
        "--tls-key",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        help="TLS private key (PEM) for a TCP listener",
    ),
    click.option(
        "--breaker",
        "breaker_rules",
        multiple=True,
        metavar="TYPE[=RATE%/MIN/WINDOW]",
        help="a job type's circuit breaker: open when RATE of at least MIN calls in WINDOW "
        "failed, e.g. send_receipt=50%/20/30s; TYPE alone: 50%/20/30s (repeatable)",
    ),
    click.option(
        "--breaker-default",
        default=_BREAKERS.default.describe() if _BREAKERS.default else "off",
        show_default=True,
        metavar="RATE%/MIN/WINDOW|on|off",
        help="the breaker rule of every other job type; on: 50%/20/30s; off: breakers only "
        "for --breaker types (and for a type whose handler raised DependencyDown)",
    ),
    click.option(
        "--breaker-cooldown",
        type=DURATION,
        default=shown(_BREAKERS.cooldown_s),
        show_default=True,
        help="how long a breaker stays open before probes; doubled each time a probe fails",
    ),
    click.option(
        "--breaker-cooldown-max",
        type=DURATION,
        default=shown(_BREAKERS.cooldown_max_s),
        show_default=True,
        help="the cap of the doubled cool-down",
    ),
    click.option(
        "--breaker-probes",
        type=click.IntRange(min=1),
        default=_BREAKERS.probes,
        show_default=True,
        help="jobs a half-open breaker dispatches to test the dependency",
    ),
    log_level_option(),
]


def serve_options(command: F) -> F:
    """Apply every option of ``serve`` to ``command``, the first listed first in ``--help``."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command
