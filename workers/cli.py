"""``workers`` command line: ``workers run MODULE:APP``."""

from __future__ import annotations

import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from jobcore import gc_tuning
from jobcore.cli_env import (
    environment,
    leasekeeper_client_options,
    schema_path_option,
    topic_prefix_option,
)
from jobcore.cli_errors import FriendlyGroup, SetupMistake, log_level_option
from jobcore.cli_registry import schema_registry_options, schemas_for
from jobcore.config import ENV_TRUST_OWNER
from jobcore.durations import DURATION, shown
from jobcore.results import DEFAULT_RESULT_BYTES, MAX_RESULT_BYTES
from jobcore.socket_owner import target_problem
from schemas.codec import EnvelopeCodec, SchemaError
from workers.app import App
from workers.client import LeaseKeeperClient, LeaseKeeperRejected, UntrustedSocket
from workers.decoding import EnvelopeDecoder, default_decoder, job_types
from workers.loading import AppNotFound, load_app
from workers.runtime import DEFAULT_PREFETCH, Worker
from workers.supervisor import run_in_foreground, supervise

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """``workers run``'s settings once defaults from the environment are applied."""

    app_spec: str
    target: str
    token: str | None
    concurrency: int
    processes: int
    prefetch: int = DEFAULT_PREFETCH
    worker_id: str
    schema_dirs: tuple[str, ...]
    grace_s: float
    log_level: str
    heartbeats: bool = True
    tls_ca: str | None = None
    trust_owner: int | None = None
    schema_registry: str | None = None
    schema_registry_config: Path | None = None
    topic_prefix: str = "jobs"
    max_result_bytes: int = DEFAULT_RESULT_BYTES

    def child_command(self, index: int, parent_pid: int) -> list[str]:
        """The command line of child ``index`` under ``--processes`` (the token reaches
        it by the inherited environment, never on a command line others can read)."""
        return [
            sys.executable, "-m", "workers", "run", self.app_spec,
            "--target", self.target,
            "--concurrency", str(self.concurrency),
            "--prefetch", str(self.prefetch),
            "--worker-id", f"{self.worker_id}-{index}",
            "--grace", str(self.grace_s),
            "--log-level", self.log_level,
            "--parent-pid", str(parent_pid),
            "--topic-prefix", self.topic_prefix,
            "--max-result-bytes", str(self.max_result_bytes),
            *(f"--schema-path={d}" for d in self.schema_dirs),
            *([f"--tls-ca={self.tls_ca}"] if self.tls_ca else []),
            *([f"--trust-owner={self.trust_owner}"] if self.trust_owner is not None else []),
            *([f"--schema-registry={self.schema_registry}"] if self.schema_registry else []),
            *([f"--schema-registry-config={self.schema_registry_config}"]
              if self.schema_registry_config else []),
        ]  # fmt: skip


@click.group(cls=FriendlyGroup)
def main() -> None:
    """Run job handlers that claim work from a leasekeeper."""


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option(
    "--queue",
    default=None,
    help="Claim from this queue's leasekeeper, at its default socket (as `leasekeeper serve "
    "--queue QUEUE` listens).",
)
@leasekeeper_client_options
@click.option(
    "--trust-owner",
    type=click.IntRange(min=0),
    envvar=ENV_TRUST_OWNER,
    show_envvar=True,
    default=None,
    metavar="UID",
    help="Also connect to a --target socket owned by this uid (one sharing its socket "
    "with a group, --socket-mode 0660); this user's and root's are always accepted, the "
    "default socket only when this user's.",
)
@topic_prefix_option
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Jobs run at once per process.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(min=1),
    default=DEFAULT_PREFETCH,
    show_default=True,
    help="Jobs held per slot (2: the next job waits here, so a slot never waits for a "
    "claim; 1 for long jobs, which a busy worker would hold back from others).",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes to start; signals are forwarded to them.",
)
@click.option("--worker-id", help="Name reported to the leasekeeper [HOST-PID].")
@click.option(
    "--max-result-bytes",
    type=click.IntRange(min=1, max=MAX_RESULT_BYTES),
    default=DEFAULT_RESULT_BYTES,
    show_default=True,
    help="Largest return value a handler may send back, JSON-encoded (up to 65536); a "
    "larger one fails its job: store the value elsewhere and return a reference.",
)
@schema_path_option()
@click.option(
    "--grace",
    type=DURATION,
    default=shown(30.0),
    show_default=True,
    help="How long running jobs get to finish after SIGTERM (30s, 2m).",
)
@log_level_option()
@click.option("--parent-pid", type=int, hidden=True)
@click.option(
    "--heartbeats/--no-heartbeats",
    default=True,
    hidden=True,
    help="--no-heartbeats acts like a worker cut off from its leasekeeper (fencing tests)",
)
@schema_registry_options
def run(
    app_spec: str,
    queue: str | None,
    target: str | None,
    concurrency: int,
    prefetch: int,
    processes: int,
    worker_id: str | None,
    schema_paths: tuple[str, ...],
    grace: float,
    log_level: str,
    tls_ca: str | None,
    trust_owner: int | None,
    parent_pid: int | None,
    heartbeats: bool,
    schema_registry: str | None,
    schema_registry_config: Path | None,
    max_result_bytes: int,
) -> None:
    """Run the handlers of MODULE:APP (imported like uvicorn does, from the current directory).

    SIGTERM or Ctrl-C stops claiming, releases jobs that have not started and
    waits up to --grace seconds for running ones; a second signal exits at once.
    """
    env = environment()
    options = RunOptions(
        app_spec=app_spec,
        target=env.target(target, queue=queue),
        token=env.leasekeeper_token,
        concurrency=concurrency,
        prefetch=prefetch,
        processes=processes,
        worker_id=worker_id or f"{socket.gethostname()}-{os.getpid()}",
        # --schema-path added to JOBS_SCHEMA_PATH, as in every command (children get the sum).
        schema_dirs=schema_paths,
        grace_s=grace,
        log_level=log_level.upper(),
        heartbeats=heartbeats,
        tls_ca=tls_ca,
        trust_owner=trust_owner,
        schema_registry=schema_registry,
        schema_registry_config=schema_registry_config,
        topic_prefix=env.topic_prefix,
        max_result_bytes=max_result_bytes,
    )
    logging.basicConfig(
        level=options.log_level,
        format="%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s",
    )
    app = _load(app_spec)
    decoder = _decoder(options)
    _check_runnable(app, decoder, options)
    # Once, before any process starts; each client checks again whenever it connects.
    untrusted = target_problem(options.target, options.trust_owner)
    if untrusted is not None:
        raise SetupMistake(untrusted)
    if options.processes > 1:
        commands = [options.child_command(i, os.getpid()) for i in range(options.processes)]
        sys.exit(supervise(commands))
    _run_one(app, decoder, options, parent_pid)


def _load(app_spec: str) -> App:
    try:
        return load_app(app_spec)
    except AppNotFound as exc:
        raise click.BadParameter(str(exc), param_hint="MODULE:APP") from exc


def _decoder(options: RunOptions) -> EnvelopeDecoder:
    if options.schema_registry or options.schema_registry_config:
        registry = schemas_for(
            options.schema_dirs,
            url=options.schema_registry,
            config=options.schema_registry_config,
            prefix=options.topic_prefix,
        )
        return EnvelopeCodec(registry)
    try:
        return default_decoder(options.schema_dirs)
    except SchemaError as exc:
        raise click.ClickException(f"cannot load payload schemas: {exc}") from exc


def _read_ca(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise click.ClickException(
            f"cannot read the TLS CA file {path} (--tls-ca or LEASEKEEPER_TLS_CA): {exc}"
        ) from None


def _check_runnable(app: App, decoder: EnvelopeDecoder, options: RunOptions) -> None:
    """A worker that has handlers but no schema for any of them would claim nothing."""
    if not app.handlers:
        raise click.ClickException(
            f"app {app.name!r} ({options.app_spec}) has no handlers: it would claim every "
            "type and run none; register them with @app.job('TYPE')"
        )
    types = job_types(app, decoder)
    if not types.runnable:
        where = ", ".join(options.schema_dirs) or "none given"
        raise click.ClickException(
            f"no payload schema for any job type of app {app.name!r} "
            f"({', '.join(types.missing_schema)}; schema directories: {where}); "
            "add TYPE.avsc files with --schema-path or JOBS_SCHEMA_PATH"
        )


def _run_one(
    app: App, decoder: EnvelopeDecoder, options: RunOptions, parent_pid: int | None
) -> None:
    tls_ca = _read_ca(options.tls_ca)
    with LeaseKeeperClient(
        options.target,
        worker_id=options.worker_id,
        token=options.token,
        tls_ca=tls_ca,
        trust_owner=options.trust_owner,
    ) as client:
        worker = Worker(
            app,
            client,
            decoder=decoder,
            concurrency=options.concurrency,
            prefetch=options.prefetch,
            worker_id=options.worker_id,
            shutdown_grace_s=options.grace_s,
            heartbeats=options.heartbeats,
            max_result_bytes=options.max_result_bytes,
        )
        gc_tuning.settle_after_startup()  # the app and clients out of the collector's scans
        try:
            run_in_foreground(worker, parent_pid=parent_pid)
        except UntrustedSocket as exc:
            raise SetupMistake(str(exc)) from exc
        except LeaseKeeperRejected as exc:
            raise click.ClickException(str(exc)) from exc
    if worker.abandoned:
        # Pool threads of handlers that outlived the grace period would keep
        # the interpreter from exiting; their leases were released already.
        log.warning("exiting with %d handler(s) still running", worker.abandoned)
        logging.shutdown()
        os._exit(0)
