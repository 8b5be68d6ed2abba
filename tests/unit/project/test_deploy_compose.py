"""docker-compose.yml, Dockerfile and deploy/prometheus stay true to the code.

No Docker engine runs here, so the compose file is checked by parsing it (PyYAML):
every docstream container runs a real `docstream` subcommand (read from the typer
app), every DOCSTREAM_* variable is a real setting (derived from the Settings
model) with a valid value, start order and health checks hold, and Prometheus
scrapes every service. `docker compose config` runs too, but only where a compose
client exists: that test is collected only then.

The helpers without a leading underscore are shared with test_deploy_k8s.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import typing
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
import typer.main
import yaml
from pydantic import BaseModel, SecretStr

import docstream.settings
from docstream.settings import Settings, load_settings
from docstream_cli.app import app

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_FILE = ROOT / "deploy" / "prometheus" / "prometheus.yml"

# The intake API serves /healthz, /readyz and /metrics on its own HTTP port.
API_PORT = 8080
# Commands that prepare and exit (docstream_ingest.main: topics and store schema, then 0);
# every other command runs until SIGTERM and serves /metrics, /healthz, /readyz.
ONE_SHOT = frozenset({"ingest"})
# Drain budget per batch in flight through the model (worst case, CPU); docs/operations.md.
WORST_BATCH_S = 10.0
INFRA = ("kafka", "cassandra", "schema-registry")


# ---------------------------------------------------------------- shared helpers


def cli_commands() -> set[str]:
    """Names of the `docstream` subcommands, from the typer app itself."""
    group = typer.main.get_command(app)
    return set(group.commands)  # type: ignore[attr-defined]


def _leaf_fields(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, Any]]:
    for name, field in model.model_fields.items():
        env = f"{prefix}{name.upper()}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaf_fields(annotation, f"{env}__")
        else:
            yield env, annotation


@cache
def settings_env_names() -> frozenset[str]:
    """Every DOCSTREAM_* variable the Settings model reads (nested with ``__``)."""
    names = {env for env, _ in _leaf_fields(Settings, "DOCSTREAM_")}
    if "DOCSTREAM_CONFIG_FILE" in Path(docstream.settings.__file__).read_text():
        names.add("DOCSTREAM_CONFIG_FILE")
    return frozenset(names)


@cache
def _mapping_env_names() -> frozenset[str]:
    return frozenset(env for env, ann in _leaf_fields(Settings, "DOCSTREAM_") if typing.get_origin(ann) is dict)


@cache
def secret_env_names() -> frozenset[str]:
    """The DOCSTREAM_* variables of SecretStr settings (passwords, keys)."""
    return frozenset(
        env
        for env, ann in _leaf_fields(Settings, "DOCSTREAM_")
        if ann is SecretStr or SecretStr in typing.get_args(ann)
    )


def is_setting(name: str) -> bool:
    """True when ``name`` is a DOCSTREAM_* variable the Settings model reads."""
    if name in settings_env_names():
        return True
    return any(name.startswith(f"{mapping}__") for mapping in _mapping_env_names())


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """Settings as a process with exactly these DOCSTREAM_* variables would load them."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    with mock.patch.dict(os.environ, {**clean, **env}, clear=True):
        return load_settings()


def drain_budget_s(command: str, settings: Settings, pre_stop_s: float = 0.0) -> float:
    """Seconds a service needs after SIGTERM to finish what it holds and commit it."""
    budget = pre_stop_s + settings.cassandra.request_timeout_s
    if command == "chunker":
        budget += settings.chunker.timeout_s
    elif command == "inference" and settings.tasks.task == "generate":
        # a batch's requests are concurrent: the one in flight finishes, what is cut is asked again (no chunk
        # already written: the generate task reuses stored rows)
        budget += settings.inference.max_latency_ms / 1000 + settings.tasks.generate.endpoint.timeout_s
    elif command == "inference":
        held = settings.inference.queue_batches + settings.inference.length_pool_batches + 1  # Q1, the pool, the model
        budget += settings.inference.max_latency_ms / 1000 + held * WORST_BATCH_S
    elif command == "reducer":
        budget += settings.reducer.webhook_timeout_s
    elif command == "document-stage":  # the level in flight finishes; a longer tree is cut and asked again
        budget += settings.tasks.generate.endpoint.timeout_s
    return float(budget)


# ---------------------------------------------------------------- compose helpers


@cache
def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _services() -> dict[str, dict[str, Any]]:
    services = _compose()["services"]
    assert isinstance(services, dict)
    return services


def _docstream_services() -> list[str]:
    return sorted(name for name, svc in _services().items() if "build" in svc)


def _long_running() -> list[str]:
    return [name for name in _docstream_services() if _command(_services()[name])[1] not in ONE_SHOT]


def _one_shot() -> list[str]:
    return [name for name in _docstream_services() if _command(_services()[name])[1] in ONE_SHOT]


def _env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    return {str(k): _interpolate(str(v)) for k, v in raw.items()}


def _interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with VAR unset."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def _command(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def _metrics_port(name: str) -> int:
    service = _services()[name]
    if _command(service)[1] == "api":
        return API_PORT
    return int(settings_from_env(_env(service)).metrics.port)


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """source -> target of a service's short-syntax volumes (source:target[:mode])."""
    pairs = (str(volume).split(":") for volume in service.get("volumes", []))
    return {parts[0]: parts[1] for parts in pairs}


def _duration_s(text: str) -> float:
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?", str(text))
    assert parts and any(parts.groups()), f"not a compose duration: {text!r}"
    hours, minutes, seconds = (int(p or 0) for p in parts.groups())
    return hours * 3600 + minutes * 60 + seconds


def _depends(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {dep: spec.get("condition", "service_started") for dep, spec in raw.items()}


def _waits_for(name: str, condition: str = "service_healthy") -> set[str]:
    """Services that ``name`` transitively waits for (healthy, or done) before it starts."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dep, cond in _depends(_services()[todo.pop()]).items():
            if cond in {condition, "service_healthy"} and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _healthcheck_url(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    text = " ".join(test) if isinstance(test, list) else test
    match = re.search(r"https?://[^\s'\"]+", text)
    assert match, f"health check calls no URL: {text}"
    return match.group(0)


# ---------------------------------------------------------------- tests: the stack


def test_compose_has_the_whole_stack() -> None:
    services = _services()
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["cassandra"]["image"].startswith("cassandra:5.")
    assert re.match(r"(confluentinc/cp-schema-registry:7\.7\.|apicurio/)", services["schema-registry"]["image"])
    assert services["prometheus"]["image"].startswith("prom/prometheus")
    assert services["grafana"]["image"].startswith("grafana/grafana")
    commands = {_command(services[name])[1] for name in _docstream_services()}
    assert {"ingest", "chunker", "inference", "reducer", "api"} <= commands
    assert ONE_SHOT <= commands


def test_kafka_is_a_single_kraft_node_the_services_can_reach() -> None:
    env = _env(_services()["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in key for key in env)
    node_id = env["KAFKA_NODE_ID"]
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert [v.split("@")[0] for v in voters] == [node_id]
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    listener_ports = {
        name: port for name, port in re.findall(r"([A-Z_]+)://[^:,]*:(\d+)", env["KAFKA_LISTENERS"])
    }
    assert voters[0].endswith(f"@kafka:{listener_ports[controller]}")
    advertised = dict(re.findall(r"([A-Z_]+)://([^,]+)", env["KAFKA_ADVERTISED_LISTENERS"]))
    inter_broker = advertised[env["KAFKA_INTER_BROKER_LISTENER_NAME"]]
    for name in _docstream_services():
        assert settings_from_env(_env(_services()[name])).kafka.bootstrap_servers == inter_broker, name
    assert env["KAFKA_LOG_DIRS"] in _mounts(_services()["kafka"]).values()


@pytest.mark.parametrize("name", _docstream_services())
def test_docstream_service_runs_a_real_command_from_the_one_image(name: str) -> None:
    service = _services()[name]
    command = _command(service)
    assert command[0] == "docstream"
    assert command[1] in cli_commands(), f"`docstream {command[1]}` is not a command of docstream_cli.app"
    assert len(command) == 2
    build = service["build"]
    assert (COMPOSE_FILE.parent / build["context"]).resolve() == ROOT
    assert (ROOT / build.get("dockerfile", "Dockerfile")).is_file()
    assert service["image"] == _services()[_docstream_services()[0]]["image"]


@pytest.mark.parametrize("name", _docstream_services())
def test_docstream_env_vars_are_real_settings_with_valid_values(name: str) -> None:
    env = _env(_services()[name])
    unknown = sorted(key for key in env if key.startswith("DOCSTREAM_") and not is_setting(key))
    assert unknown == [], f"not settings of docstream.settings.Settings: {unknown}"
    settings = settings_from_env(env)
    assert settings.service == _command(_services()[name])[1]
    assert settings.log.format == "json"
    assert settings.store.backend == "cassandra"
    assert settings.metrics.port > 0


@pytest.mark.parametrize("name", _docstream_services())
def test_docstream_env_points_at_the_compose_services(name: str) -> None:
    settings = settings_from_env(_env(_services()[name]))
    assert settings.cassandra.contact_points == ["cassandra"]
    assert settings.cassandra.port == 9042
    assert settings.cassandra.local_dc == _env(_services()["cassandra"])["CASSANDRA_DC"]
    registry = urlsplit(settings.kafka.schema_registry_url or "")
    listener = urlsplit(_env(_services()["schema-registry"])["SCHEMA_REGISTRY_LISTENERS"])
    assert (registry.hostname, registry.port) == ("schema-registry", listener.port)
    assert settings.kafka.replication_factor == 1  # one broker


def test_every_long_running_service_has_a_health_check_and_restarts() -> None:
    long_running = [name for name in _services() if name not in _one_shot()]
    assert sorted(name for name in long_running if "healthcheck" not in _services()[name]) == []
    assert sorted(name for name in long_running if _services()[name].get("restart") in {None, "no"}) == []


@pytest.mark.parametrize("name", _one_shot())
def test_one_shot_service_runs_once(name: str) -> None:
    service = _services()[name]
    assert service["restart"] == "no"
    assert "healthcheck" not in service
    assert set(INFRA) <= _waits_for(name)


@pytest.mark.parametrize("name", _long_running())
def test_docstream_health_check_calls_the_service_endpoint(name: str) -> None:
    url = urlsplit(_healthcheck_url(_services()[name]))
    assert url.hostname in {"127.0.0.1", "localhost"}
    assert url.port == _metrics_port(name)
    assert url.path in {"/readyz", "/healthz"}


def test_start_order_waits_for_healthy_dependencies() -> None:
    services = _services()
    for name, service in services.items():
        for dep, condition in _depends(service).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert condition in {"service_healthy", "service_started", "service_completed_successfully"}
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} healthy, which has no health check"
    for name in services:
        assert name not in _waits_for(name, "service_completed_successfully"), f"dependency cycle through {name}"
    assert _one_shot(), "nothing prepares the topics and the schema"
    for name in _long_running():
        assert set(INFRA) <= _waits_for(name), name
        for prepare in _one_shot():
            assert prepare in _waits_for(name, "service_completed_successfully"), f"{name} starts before {prepare}"
            assert _depends(services[name])[prepare] == "service_completed_successfully"
    assert "kafka" in _waits_for("schema-registry")
    assert "prometheus" in _waits_for("grafana")


def test_data_lives_in_named_volumes() -> None:
    declared = set(_compose()["volumes"])
    expected = {"kafka": "/var/lib/kafka/data", "cassandra": "/var/lib/cassandra", "prometheus": "/prometheus",
                "grafana": "/var/lib/grafana", "reducer": "/data/reducer"}
    for name, target in expected.items():
        named = [s for s, t in _mounts(_services()[name]).items() if t == target and not s.startswith((".", "/"))]
        assert named, f"{name} keeps {target} in no named volume"
    for name, service in _services().items():
        for source in _mounts(service):
            if source.startswith("."):
                assert (COMPOSE_FILE.parent / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"


@pytest.mark.parametrize("name", _docstream_services())
def test_stop_grace_period_covers_draining(name: str) -> None:
    service = _services()[name]
    settings = settings_from_env(_env(service))
    grace = _duration_s(service.get("stop_grace_period", "10s"))
    assert grace >= drain_budget_s(_command(service)[1], settings)


def test_prometheus_scrapes_every_docstream_service() -> None:
    config = yaml.safe_load(PROMETHEUS_FILE.read_text())
    targets: set[tuple[str, int]] = set()
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.rsplit(":", 1)
                targets.add((host, int(port)))
        for dns in job.get("dns_sd_configs", []):
            targets |= {(host, int(dns["port"])) for host in dns["names"]}
        assert job.get("metrics_path", "/metrics") == "/metrics"
    expected = {(name, _metrics_port(name)) for name in _long_running()}
    assert expected <= targets, f"not scraped: {sorted(expected - targets)}"
    assert _mounts(_services()["prometheus"])["./deploy/prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    assert "--config.file=/etc/prometheus/prometheus.yml" in _services()["prometheus"]["command"]


def test_grafana_provisions_the_dashboard_from_deploy() -> None:
    mounts = _mounts(_services()["grafana"])
    provisioning = ROOT / "deploy" / "grafana" / "provisioning"
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    providers = yaml.safe_load((provisioning / "dashboards" / "docstream.yml").read_text())["providers"]
    assert [p["options"]["path"] for p in providers] == [mounts["./deploy/grafana/dashboards"]]
    assert list((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
    datasources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    url = urlsplit(datasources[0]["url"])
    assert (url.hostname, url.port) == ("prometheus", 9090)


def test_dockerfile_installs_the_repo_editable_and_sets_only_real_settings() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.MULTILINE)
    assert "COPY . /app" in dockerfile
    assert "pip install --no-deps -e /app" in dockerfile
    env_names = set(re.findall(r"\b(DOCSTREAM_[A-Z0-9_]+)=", dockerfile))
    assert env_names, "the Dockerfile sets no DOCSTREAM_* defaults"
    assert sorted(n for n in env_names if not is_setting(n)) == []
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv"} <= ignored
    needed = {"pyproject.toml", "README.md", "schemas", "libs", "services"}
    assert needed & ignored == set(), "the image needs these to install and find schemas/"


@pytest.mark.parametrize("doc", ["docs/operations.md", "docs/runbook.md"])
def test_ops_docs_name_real_or_marked_planned_commands(doc: str) -> None:
    text = (ROOT / doc).read_text()
    quoted = re.findall(r"`docstream ([a-z][a-z-]*)", text)
    blocks = "\n".join(re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL))
    in_blocks = re.findall(r"^\s*(?:\$\s*)?docstream ([a-z][a-z-]*)", blocks, re.MULTILINE)
    used = set(quoted) | set(in_blocks)
    assert used, f"{doc} names no docstream command"
    missing = sorted(used - cli_commands())
    for command in missing:
        lines = [line for line in text.splitlines() if f"docstream {command}" in line]
        assert any("planned" in line.lower() for line in lines), f"{doc}: `docstream {command}` is not a command"


# ---------------------------------------------------------------- docker compose config, where a client exists


def _compose_client() -> list[str] | None:
    candidates = [["docker", "compose"], ["docker-compose"]]
    for argv in candidates:
        if shutil.which(argv[0]) is None:
            continue
        probe = subprocess.run([*argv, "version"], capture_output=True, text=True, timeout=30, check=False)
        if probe.returncode == 0:
            return argv
    return None


_COMPOSE_CLIENT = _compose_client()

if _COMPOSE_CLIENT is not None:

    def test_docker_compose_config_accepts_the_file() -> None:
        assert _COMPOSE_CLIENT is not None
        done = subprocess.run(
            [*_COMPOSE_CLIENT, "-f", str(COMPOSE_FILE), "config"],
            capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        rendered = yaml.safe_load(done.stdout)
        assert set(rendered["services"]) == set(_services())
        for name in _docstream_services():
            assert rendered["services"][name]["command"] == _command(_services()[name])
