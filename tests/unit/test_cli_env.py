"""Every command reads its environment variables through click's ``envvar=``.

The tree walk proves the declarations (and that ``--help`` shows each variable);
a source scan proves no command module reads the environment by hand; the
representative cases prove a variable takes effect, that the flag still wins, and
that ``--schema-path`` adds to ``JOBS_SCHEMA_PATH`` in every command.
"""

from __future__ import annotations

import ast
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from leasekeeper.ops import cli as leasekeeper_cli
from producer import cli as producer_cli
from workers import cli as workers_cli

REPO = Path(__file__).resolve().parents[2]

KAFKA = {"KAFKA_BOOTSTRAP", "KAFKA_CONFIG", "JOBS_TOPIC_PREFIX"}
SCHEMAS = {"JOBS_SCHEMA_PATH", "SCHEMA_REGISTRY_URL", "SCHEMA_REGISTRY_CONFIG"}
CLIENT = {"LEASEKEEPER_TARGET", "LEASEKEEPER_TOKEN", "LEASEKEEPER_TLS_CA"}
LOG = {"LOG_LEVEL"}

# What each command reads from the environment: every one must be an option's envvar.
EXPECTED: dict[str, set[str]] = {
    "producer enqueue": KAFKA | SCHEMAS | {"JOBS_PRIORITY_CLASSES"},
    "producer cancel": KAFKA,
    "producer status": KAFKA | {"DASHBOARD_TOKEN"},
    "producer create-queue": KAFKA | {"JOBS_PRIORITY_CLASSES"},
    "producer cron run": KAFKA | SCHEMAS | LOG,
    "producer cron list": KAFKA | {"JOBS_SCHEMA_PATH"},
    "producer schemas check": SCHEMAS | {"JOBS_TOPIC_PREFIX"},
    "producer schemas register": SCHEMAS | {"JOBS_TOPIC_PREFIX"},
    "producer outbox relay": KAFKA | LOG | {"JOBS_SCHEMA_PATH"},
    "leasekeeper serve": KAFKA
    | SCHEMAS
    | LOG
    | {"LEASEKEEPER_TARGET", "LEASEKEEPER_TOKEN", "JOBS_PRIORITY_CLASSES"},
    "leasekeeper inspect": CLIENT,
    "leasekeeper inspect job": CLIENT | KAFKA,
    "leasekeeper dlq list": KAFKA | SCHEMAS,
    "leasekeeper dlq show": KAFKA | SCHEMAS,
    "leasekeeper dlq replay": KAFKA | SCHEMAS,
    "leasekeeper dashboard": KAFKA | SCHEMAS | LOG | {"DASHBOARD_TOKEN", "DASHBOARD_ALLOWED_HOSTS"},
    "leasekeeper breaker open": KAFKA,
    "leasekeeper breaker close": KAFKA,
    "leasekeeper dev kafka": {"LOCAL_KAFKA_DIR"},
    "leasekeeper dev kafka fetch": {"KAFKA_VERSION", "KAFKA_HOME"},
    "leasekeeper dev kafka start": {"KAFKA_VERSION", "KAFKA_HOME"},
    "workers run": CLIENT | SCHEMAS | LOG | {"JOBS_TOPIC_PREFIX"},
}

# Modules that define options or commands (they use click): none may read the
# environment by hand. Found, not listed, so a new command module is covered too.
COMMAND_MODULES = sorted(
    str(path.relative_to(REPO))
    for package in ("producer", "leasekeeper", "workers", "devtools", "jobcore")
    for path in (REPO / package).rglob("*.py")
    if "click." in path.read_text()
)
# What a flag implies the command reads: a command added later gets the same rule.
BY_FLAG = {
    "bootstrap": KAFKA,
    "schema_path": {"JOBS_SCHEMA_PATH"},
    "schema_paths": {"JOBS_SCHEMA_PATH"},
    "target": {"LEASEKEEPER_TARGET", "LEASEKEEPER_TOKEN", "LEASEKEEPER_TLS_CA"},
    "log_level": LOG,
    "schema_registry": {"SCHEMA_REGISTRY_URL", "SCHEMA_REGISTRY_CONFIG"},
}
_BY_HAND = {"environ", "getenv", "from_env", "schema_path_from_env"}


def _walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path.split()[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from _walk(sub, f"{path} {name}")


def _tree() -> dict[str, click.Command]:
    roots = {
        "producer": producer_cli.main,
        "leasekeeper": leasekeeper_cli.main,
        "workers": workers_cli.main,
    }
    return {path: cmd for root, main in roots.items() for path, cmd in _walk(main, root)}


def _envvars(command: click.Command) -> dict[str, click.Option]:
    found = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.envvar:
            names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
            found.update(dict.fromkeys(names, param))
    return found


def test_the_walk_reaches_every_command_listed() -> None:
    assert set(EXPECTED) <= set(_tree())


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_each_variable_a_command_reads_is_an_option_envvar(path: str) -> None:
    declared = _envvars(_tree()[path])
    missing = EXPECTED[path] - set(declared)
    assert not missing, f"{path} reads {sorted(missing)} without declaring envvar="


def test_a_command_with_a_flag_reads_the_variables_that_go_with_it() -> None:
    for path, command in _tree().items():
        names = {param.name for param in command.params}
        wanted = set().union(*(v for k, v in BY_FLAG.items() if k in names))
        missing = wanted - set(_envvars(command))
        assert not missing, f"{path} has the flags but not the variables {sorted(missing)}"


def test_every_declared_variable_is_shown_in_help() -> None:
    for path, command in _tree().items():
        for name, option in _envvars(command).items():
            assert option.show_envvar, f"{path}: {name} is not shown in --help"
    help_text = CliRunner().invoke(producer_cli.main, ["enqueue", "--help"]).output
    assert "KAFKA_BOOTSTRAP" in help_text and "JOBS_TOPIC_PREFIX" in help_text


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_no_command_module_reads_the_environment_by_hand(module: str) -> None:
    tree = ast.parse((REPO / module).read_text())
    found = [
        f"{module}:{node.lineno} {node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in _BY_HAND
    ] + [
        f"{module}:{node.lineno} {node.id}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id in _BY_HAND
    ]
    assert not found


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No setting from the machine running the tests, and no recorded local Kafka."""
    for name in set().union(*EXPECTED.values()):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    return monkeypatch


def _schema_dir(root: Path, job_type: str) -> Path:
    directory = root / job_type
    directory.mkdir()
    schema = {"type": "record", "name": job_type, "fields": [{"name": "n", "type": "long"}]}
    (directory / f"{job_type}.avsc").write_text(json.dumps(schema))
    return directory


_ENQUEUE = ["--tenant", "t", "--payload", '{"n": 1}', "--connect-timeout", "1s"]


def test_kafka_bootstrap_takes_effect_and_is_named_as_the_origin(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("KAFKA_BOOTSTRAP", "127.0.0.1:1")
    runner = CliRunner()
    from_env = runner.invoke(producer_cli.main, ["enqueue", "--queue", "q", "noop", *_ENQUEUE])
    assert from_env.exit_code == 3
    assert "cannot reach Kafka at 127.0.0.1:1 (KAFKA_BOOTSTRAP;" in from_env.output
    flag = runner.invoke(
        producer_cli.main,
        ["enqueue", "--queue", "q", "noop", *_ENQUEUE, "--bootstrap", "127.0.0.1:2"],
    )
    assert "cannot reach Kafka at 127.0.0.1:2 (--bootstrap;" in flag.output


@pytest.mark.parametrize("command", ["producer", "workers"])
def test_schema_path_adds_to_the_variable_in_every_command(
    command: str, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from_env = _schema_dir(tmp_path, "alpha")
    from_flag = _schema_dir(tmp_path, "beta")
    clean_env.setenv("JOBS_SCHEMA_PATH", str(from_env))
    if command == "producer":
        for job_type in ("alpha", "beta"):  # both known: validation passes, Kafka is next
            result = CliRunner().invoke(
                producer_cli.main,
                [
                    *("enqueue", "--queue", "q", job_type, *_ENQUEUE),
                    *("--bootstrap", "127.0.0.1:1", "--schema-path", str(from_flag)),
                ],
            )
            assert "cannot reach Kafka" in result.output, result.output
        return
    seen = _run_workers(clean_env, tmp_path, ["--schema-path", str(from_flag)])
    assert seen.schema_dirs == (str(from_flag), str(from_env))


def _run_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]
) -> workers_cli.RunOptions:
    """``workers run`` up to the point it would connect; returns its options."""
    name = f"envapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from workers import App\napp = App('env')\n\n"
        "@app.job('alpha')\ndef alpha(ctx, payload):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[workers_cli.RunOptions] = []
    monkeypatch.setattr(
        workers_cli, "_run_one", lambda app, dec, options, pid: seen.append(options)
    )
    result = CliRunner().invoke(workers_cli.main, ["run", f"{name}:app", *args])
    assert result.exit_code == 0, result.output
    return seen[0]


def test_worker_token_target_and_prefix_come_from_their_variables(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("JOBS_SCHEMA_PATH", str(_schema_dir(tmp_path, "alpha")))
    clean_env.setenv("LEASEKEEPER_TOKEN", "s3cret")
    clean_env.setenv("LEASEKEEPER_TARGET", "127.0.0.1:7001")
    clean_env.setenv("JOBS_TOPIC_PREFIX", "acme")
    options = _run_workers(clean_env, tmp_path, [])
    assert (options.token, options.target, options.topic_prefix) == (
        "s3cret",
        "127.0.0.1:7001",
        "acme",
    )
    flagged = _run_workers(clean_env, tmp_path, ["--target", "127.0.0.1:7002"])
    assert flagged.target == "127.0.0.1:7002"  # the flag wins


@pytest.mark.parametrize(
    ("root", "args", "variable"),
    [
        (workers_cli.main, ["run", "m:app", "--token", "s3cret"], "LEASEKEEPER_TOKEN"),
        (leasekeeper_cli.main, ["inspect", "--token", "s3cret"], "LEASEKEEPER_TOKEN"),
        (producer_cli.main, ["status", "q", "j", "--dashboard-token", "s"], "DASHBOARD_TOKEN"),
    ],
)
def test_a_secret_is_read_from_its_variable_only(
    root: click.Command, args: list[str], variable: str, clean_env: pytest.MonkeyPatch
) -> None:
    refused = CliRunner().invoke(root, args)
    assert refused.exit_code == 2
    assert f"set {variable} in the environment instead" in refused.output
    assert f"${variable}" in CliRunner().invoke(root, [args[0], "--help"]).output


def test_leasekeeper_target_is_named_when_no_leasekeeper_answers(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    address = f"unix:{tmp_path / 'nobody.sock'}"
    clean_env.setenv("LEASEKEEPER_TARGET", address)
    result = CliRunner().invoke(leasekeeper_cli.main, ["inspect"])
    assert result.exit_code == 3
    assert f"no leasekeeper answers at {address} (LEASEKEEPER_TARGET)" in result.output
    flag = CliRunner().invoke(leasekeeper_cli.main, ["inspect", "--target", address])
    assert f"{address} (--target)" in flag.output


def test_priority_classes_come_from_their_variable(clean_env: pytest.MonkeyPatch) -> None:
    args = ["enqueue", "--queue", "q", "noop", *_ENQUEUE, "--bootstrap", "127.0.0.1:1"]
    unknown = CliRunner().invoke(producer_cli.main, [*args, "--priority", "urgent"])
    assert "unknown priority class 'urgent'" in unknown.output
    clean_env.setenv("JOBS_PRIORITY_CLASSES", "urgent=5,default=1")
    known = CliRunner().invoke(producer_cli.main, [*args, "--priority", "urgent"])
    assert "cannot reach Kafka" in known.output, known.output
    clean_env.setenv("JOBS_PRIORITY_CLASSES", "urgent")
    bad = CliRunner().invoke(producer_cli.main, args)
    assert bad.exit_code == 2 and "JOBS_PRIORITY_CLASSES: 'urgent' is not NAME=WEIGHT" in (
        bad.output
    )


def test_log_level_debug_shows_the_traceback(clean_env: pytest.MonkeyPatch) -> None:
    args = ["enqueue", "--queue", "q", "no_such_type", *_ENQUEUE]
    quiet = CliRunner().invoke(producer_cli.main, args)
    assert "Traceback" not in quiet.output and "no schema for job type" in quiet.output
    clean_env.setenv("LOG_LEVEL", "debug")
    loud = CliRunner().invoke(producer_cli.main, args)
    assert "Traceback" in loud.output


def test_a_group_flag_wins_over_the_subcommands_variable(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    flag = f"unix:{tmp_path / 'flag.sock'}"
    clean_env.setenv("LEASEKEEPER_TARGET", f"unix:{tmp_path / 'env.sock'}")
    result = CliRunner().invoke(
        leasekeeper_cli.main, ["inspect", "--target", flag, "job", "0123456789abcdef"]
    )
    assert result.exit_code == 3
    assert f"no leasekeeper answers at {flag} (--target)" in result.output


def test_a_group_flag_is_kept_when_the_subcommand_reads_the_variable(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from_env = tmp_path / "env-ca.pem"
    from_env.write_text("not used")
    clean_env.setenv("LEASEKEEPER_TLS_CA", str(from_env))
    missing = tmp_path / "flag-ca.pem"
    result = CliRunner().invoke(
        leasekeeper_cli.main,
        ["inspect", "--tls-ca", str(missing), "--target", "127.0.0.1:1", "job", "0123456789ab"],
    )
    assert "cannot read the TLS CA file" in result.output and str(missing) in result.output
