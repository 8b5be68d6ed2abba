"""The `docstream` command line: one entry point for every service and tool.

Commands import their service lazily so `docstream --help` stays fast.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from docstream.errors import ConfigError
from docstream.lanes import BATCH
from docstream.settings import Settings, load_settings

__all__ = ["app", "apply_cli_options"]

app = typer.Typer(name="docstream", help="Inference over large document jobs.", no_args_is_help=True)



def _service_main(name: str) -> Callable[[Settings], int]:
    """A service's ``main``, imported only when its command runs (the CLI starts without every service's imports)."""
    if name == "ingest":
        from docstream_ingest import main as ingest
        return ingest.main
    if name == "chunker":
        from docstream_chunker import main as chunker
        return chunker.main
    if name == "inference":
        from docstream_inference import main as inference
        return inference.main
    if name == "document-stage":
        from docstream_inference import main as inference
        return inference.document_stage_main
    from docstream_reducer import main as reducer
    return reducer.main


def apply_cli_options(settings: Settings, **sections: dict[str, Any]) -> Settings:
    """``settings`` with the command-line options that were given written over them.

    Options beat the environment and the config file. ``sections`` maps a settings section to its
    fields (``api={"host": ..., "port": ...}``); a None value is an option not given, which leaves
    the setting as it was.

    Raises:
        ConfigError: an option's value is invalid for its setting.
    """
    given = {name: {k: v for k, v in fields.items() if v is not None} for name, fields in sections.items()}
    given = {name: fields for name, fields in given.items() if fields}
    if not given:
        return settings
    try:
        return settings.with_overrides(**given)
    except ValueError as exc:
        raise ConfigError(f"invalid option: {exc}") from exc


def _settings(config: str | None, **sections: dict[str, Any]) -> Settings:
    """The settings of a command: environment, ``config`` file, then its options (``apply_cli_options``).

    Invalid settings end the command with exit status 1 and the error on stderr.
    """
    try:
        return apply_cli_options(load_settings(config), **sections)
    except ConfigError as exc:
        typer.echo(f"error [{exc.code}]: {exc.message}", err=True)
        raise typer.Exit(1) from exc


def _run_service(name: str, config: str | None, metrics_host: str | None, metrics_port: int | None,
                 **sections: dict[str, Any]) -> None:
    settings = _settings(config, metrics={"host": metrics_host, "port": metrics_port}, **sections)
    code = int(_service_main(name)(settings))
    # The service has stopped and closed its clients. A thread some library left behind (a driver's
    # reactor, a worker blocked in a call) must not keep the process alive past its exit status:
    # the reducer was seen idle for a minute after `reducer_stopped` and then exited 1 by watchdog.
    _exit_now(code)


def _passive_openmp() -> None:
    """Let ``docstream run``'s OpenMP threads sleep when idle: ``OMP_WAIT_POLICY=PASSIVE`` unless the environment
    names a policy. The model shares the cores with the broker, the chunker's extraction child and the reducer, and
    torch's threads spinning after each parallel region took their CPU (docs/performance.md "Thread split on 2
    cores"). Called before torch loads its OpenMP runtime, which reads the policy once; the services keep the
    default."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _exit_now(code: int) -> None:
    """Flush stdout, stderr and the log handlers, then end the process with ``code`` at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


_ConfigOpt = typer.Option(None, "--config", "-c", help="TOML settings file (env vars still win).")
_MetricsPortOpt = typer.Option(
    None, "--metrics-port", min=0, max=65535,
    help="Port of /metrics, /healthz, /readyz (0: off); beats metrics.port from env and --config.",
)
_MetricsHostOpt = typer.Option(
    None, "--metrics-host", help="Bind address of the metrics endpoint; beats metrics.host from env and --config."
)
_StateDirOpt = typer.Option(
    None, "--state-dir",
    help="Read the store of the `docstream run` made with this state dir; default: ./.docstream when it holds "
         "a run, unless the settings name a store (docs/storage.md).",
)


def _reader_settings(config: str | None, state_dir: str | None) -> Settings:
    """The settings of a reading command, after the store rule of docstream_cli.runstate; says on stderr what it reads.

    Raises:
        DocstreamError: the settings or a run record are invalid, or ``--state-dir`` holds no run.
    """
    from docstream_cli.statedir import resolve_reader, store_line

    reader = resolve_reader(_settings(config), state_dir=state_dir)
    typer.echo(store_line(reader), err=True)
    return reader.settings


def _store_reader(config: str | None, state_dir: str | None) -> Settings:
    """``_reader_settings`` for status/results: an error is printed and exits (2: bad input, 1: other)."""
    from docstream.errors import DocstreamError, InputError

    try:
        return _reader_settings(config, state_dir)
    except DocstreamError as exc:
        typer.echo(f"error [{exc.code}]: {exc.message}", err=True)
        raise typer.Exit(2 if isinstance(exc, InputError) else 1) from exc


@app.command()
def chunker(config: str | None = _ConfigOpt, metrics_port: int | None = _MetricsPortOpt,
            metrics_host: str | None = _MetricsHostOpt) -> None:
    """Run the chunker service: intake topic → chunks topic."""
    _run_service("chunker", config, metrics_host, metrics_port)


@app.command()
def inference(
    config: str | None = _ConfigOpt, metrics_port: int | None = _MetricsPortOpt,
    metrics_host: str | None = _MetricsHostOpt,
    task: Annotated[str | None, typer.Option(
        "--task", help="The task this service runs: embed (default), classify, entities, a user task's name or "
        "module:Class (tasks.task). Each task is a consumer group of its own (docs/tasks.md).")] = None,
    every_chunk: Annotated[bool | None, typer.Option(
        "--every-chunk/--requested-only", help="Run on every chunk, also those whose job did not ask for the "
        "task (tasks.run_unrequested: a replay of a new task over old chunks).")] = None,
) -> None:
    """Run the inference service: chunks topic → model → store → result topic."""
    _run_service("inference", config, metrics_host, metrics_port,
                 tasks={"task": task, "run_unrequested": every_chunk})


@app.command("document-stage")
def document_stage(config: str | None = _ConfigOpt, metrics_port: int | None = _MetricsPortOpt,
                   metrics_host: str | None = _MetricsHostOpt) -> None:
    """Run the generate task's document stage: mapped topic → reduce calls → store → completed topic."""
    _run_service("document-stage", config, metrics_host, metrics_port)


@app.command()
def reducer(config: str | None = _ConfigOpt, metrics_port: int | None = _MetricsPortOpt,
            metrics_host: str | None = _MetricsHostOpt) -> None:
    """Run the reducer service: result topics → completed documents and job progress."""
    _run_service("reducer", config, metrics_host, metrics_port)


@app.command()
def ingest(config: str | None = _ConfigOpt, metrics_port: int | None = _MetricsPortOpt,
           metrics_host: str | None = _MetricsHostOpt) -> None:
    """Run the ingest service (creates topics and the store schema, then serves the HTTP intake API)."""
    _run_service("ingest", config, metrics_host, metrics_port)


@app.command()
def api(
    config: str | None = _ConfigOpt,
    host: Annotated[
        str | None, typer.Option("--host", help="Bind address; beats api.host from env and --config.")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=1, max=65535, help="Port; beats api.port from env and --config.")
    ] = None,
    dump_openapi: Annotated[
        str | None, typer.Option("--dump-openapi", help="Write the OpenAPI spec to FILE ('-': stdout) and exit.")
    ] = None,
) -> None:
    """Serve the HTTP intake API on api.host:api.port (creates topics and the store schema first; docs/api.md)."""
    settings = _settings(config, api={"host": host, "port": port})
    from docstream_ingest import main as module
    raise typer.Exit(module.api_command(settings, dump=dump_openapi))


apikey_app = typer.Typer(help="API keys of the HTTP intake API (only their hashes are stored).", no_args_is_help=True)
app.add_typer(apikey_app, name="apikey")


@apikey_app.command("create")
def apikey_create(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant whose jobs the key may see and submit.")],
    name: Annotated[str | None, typer.Option("--name", help="A label for humans.")] = None,
    config: str | None = _ConfigOpt,
) -> None:
    """Create an API key: prints the key once on stdout; only its hash is stored."""
    from docstream_cli.ops import apikey as module
    raise typer.Exit(module.apikey_create_command(tenant=tenant, name=name, config=config))


@apikey_app.command("revoke")
def apikey_revoke(
    key: Annotated[str, typer.Argument(help="The key, or its key_id.")],
    config: str | None = _ConfigOpt,
) -> None:
    """Revoke an API key (effective within api.auth_cache_s)."""
    from docstream_cli.ops import apikey as module
    raise typer.Exit(module.apikey_revoke_command(key=key, config=config))


_TaskOpt = typer.Option(
    None, "--task", metavar="NAME",
    help="A task for the job's chunks (repeat for several): embed, classify, entities, a user task's name, or "
         "module:Class. Default: embed alone (docs/tasks.md).",
)
_LabelsOpt = typer.Option(
    None, "--labels",
    help='The classify labels: "name,name=description,..." (a description holds no comma), or a JSON list of '
         'names or {"name", "description"} objects. Default: tasks.classify.labels.',
)

_PromptOpt = typer.Option(
    None, "--prompt",
    help="The generate task's prompt: summarize (the default), or the instruction itself (docs/tasks.md "
         "\"generate\").",
)
_PromptFileOpt = typer.Option(None, "--prompt-file", help="The generate task's instruction, from a file.")
_SchemaOpt = typer.Option(
    None, "--schema", help="A JSON Schema file: the generate task extracts its fields from every chunk (extract).",
)


@app.command()
def submit(
    paths: Annotated[list[str], typer.Argument(help="Files, folders (walked) and .zip/.tar/.tar.gz archives.")],
    job_id: Annotated[str | None, typer.Option("--job-id", help="Job to submit to (new or existing).")] = None,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant owning the job.")] = "default",
    model: Annotated[str | None, typer.Option("--model", help="Model id for the job; default: the service's.")] = None,
    chunk_max_tokens: Annotated[int | None, typer.Option(help="Per-job chunk size in tokens.")] = None,
    chunk_overlap_tokens: Annotated[int | None, typer.Option(help="Per-job chunk overlap in tokens.")] = None,
    webhook: Annotated[str | None, typer.Option("--webhook", help="URL the reducer calls when the job ends.")] = None,
    wait: Annotated[bool, typer.Option(
        "--wait", help="Wait until the job ends, with a progress bar (docs/s, ETA); the exit status says how it ended."
    )] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", help="With --wait: give up after N seconds.")] = None,
    priority: Annotated[str, typer.Option(
        "--priority", help="The job's lane: interactive (served first) or batch (keeps a guaranteed share; default). "
        "docs/operations.md \"Sharing the service\"."
    )] = BATCH,
    admit: Annotated[str, typer.Option(
        "--admit", help="Past the tenant's quotas: refuse (submit nothing, exit 1; default) or gradually (admit the "
        "documents as the quotas free, waiting). docs/operations.md \"Quotas and admission\"."
    )] = "refuse",
    task: list[str] | None = _TaskOpt,
    labels: str | None = _LabelsOpt,
    prompt: str | None = _PromptOpt,
    prompt_file: str | None = _PromptFileOpt,
    schema: str | None = _SchemaOpt,
    config: str | None = _ConfigOpt,
) -> None:
    """Submit documents: print the job id at once, then what was submitted and refused (docs/intake.md).

    Exit status:
    0 submitted (with --wait: every document completed);
    1 nothing submitted, or an error;
    2 --wait timed out (the job goes on);
    3 the job was cancelled;
    4 the job ended with failed or partial documents;
    5 documents failed because the chunker could not read their source: a hint names the settings
    (object_store.url / DOCSTREAM_OBJECT_STORE__URL, object_store.allowed_roots).
    """
    from docstream_cli.ops import submit as module
    from docstream_cli.ops.submit import PromptFlags
    raise typer.Exit(
        module.submit_command(
            paths,
            config=config,
            job_id=job_id,
            tenant=tenant,
            model_id=model,
            chunk_max_tokens=chunk_max_tokens,
            chunk_overlap_tokens=chunk_overlap_tokens,
            webhook_url=webhook,
            wait=wait,
            timeout_s=timeout,
            priority=priority,
            admit=admit,
            tasks=task or (),
            labels=labels,
            prompt=PromptFlags(prompt, prompt_file, schema),
        )
    )


@app.command()
def status(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """Show a job's progress: state, document counts, docs/s (from the jobs row; docs/reducer.md)."""
    settings = _store_reader(config, state_dir)
    from docstream_cli.ops import status as module
    raise typer.Exit(module.status_command(job_id, settings=settings))


@app.command()
def results(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="jsonl (default) or parquet.")] = "jsonl",
    chunks: Annotated[bool, typer.Option("--chunks", help="Also export every chunk (text, pages, embedding).")] = False,
    out: Annotated[str | None, typer.Option("--out", "-o", help="Output file; jsonl default: stdout.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model whose results; default: the job's.")] = None,
    task: Annotated[
        list[str] | None,
        typer.Option("--task", help="Only this task's results (repeatable); default: every task of the job. "
                     "--task embed alone gives the records of an embed job."),
    ] = None,
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """Export a job's documents (and chunks) from the store, streaming (docs/reducer.md "Export")."""
    settings = _store_reader(config, state_dir)
    from docstream_cli.ops import results as module
    raise typer.Exit(module.results_command(job_id, fmt=fmt, chunks=chunks, out=out, model_id=model,
                                            tasks=task or None, settings=settings))


def _run_tool(config: str | None, state_dir: str | None, command: Any, *, broker: bool = False) -> int:
    """Run ``command(settings, console)`` of a replay/DLQ/search tool: bad input exits 2, failures 1.

    ``broker``: the tool reads the broker (dlq, replay), not the store: a run's own broker is started for the
    command's duration (``docstream_cli.statedir.reader_broker``), and the command is called as
    ``command(settings, console, run)``, ``run`` the ``RunBroker`` of the run it reads (None: the settings').
    """
    from rich.console import Console

    from docstream.errors import DocstreamError, InputError
    from docstream.logging import configure_logging
    from docstream_cli.statedir import reader_broker, resolve_reader

    console, errors = Console(), Console(stderr=True)
    try:
        if not broker:
            settings = _reader_settings(config, state_dir)
            configure_logging(level=settings.log.level, fmt=settings.log.format)
            return int(command(settings, console))
        reader = resolve_reader(_settings(config), state_dir=state_dir)
        configure_logging(level=reader.settings.log.level, fmt=reader.settings.log.format)
        with reader_broker(reader) as (settings, line, run):
            typer.echo(line, err=True)
            return int(command(settings, console, run))
    except InputError as exc:
        errors.print(f"[red]error:[/red] {exc.message}")
        return 2
    except DocstreamError as exc:
        errors.print(f"[red]failed ({exc.code}):[/red] {exc.message}")
        return 1


def _confirm(question: str) -> bool:
    return bool(typer.confirm(question, default=False))


_YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask before changing anything.")
_DryRunOpt = typer.Option(False, "--dry-run", help="Print what would be done; change nothing.")


@app.command()
def replay(
    service: Annotated[str, typer.Option(
        "--service", help="chunker | inference | reducer | document-stage: whose input to replay.")],
    to_datetime: Annotated[
        str | None, typer.Option("--to-datetime", help="First record at or after this ISO 8601 time (with zone).")
    ] = None,
    to_offset: Annotated[str | None, typer.Option("--to-offset", help="earliest | latest | N.")] = None,
    new_group: Annotated[
        str | None, typer.Option("--new-group", help="Create/reset this group instead of the service's own.")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Inference: the model_id the replay writes rows under.")
    ] = None,
    task: Annotated[
        str | None, typer.Option("--task", help="Inference: replay into this task's group (a new task runs over "
                                 "chunks already on the topic, beside the old results).")
    ] = None,
    lane: Annotated[str, typer.Option(
        "--lane", help="Chunker and inference: the lane whose topic to replay, batch (default) or interactive.")
    ] = BATCH,
    force: Annotated[bool, typer.Option("--force", help="Do not refuse a group with live members.")] = False,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", min=0.0, help="In a run's state dir: give up processing the replay after N seconds (exit 1, "
        "error timeout). What was written stays; the same command again processes the replay again.")] = None,
    yes: bool = _YesOpt,
    dry_run: bool = _DryRunOpt,
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """Reset (or create) a consumer group so a service processes its topic again (docs/replay.md).

    In a `docstream run` state dir, where no service runs, a chunker or inference replay with --model (a model
    folder, or a model_id for the run's weights) is processed by this command: the documents are embedded again
    and their results sit beside the first ones.
    """
    from pathlib import Path

    from docstream_cli.ops import replay as module
    from docstream_cli.runner import replay_run

    def _replay(settings: Any, console: Any, run: Any) -> int:
        model_id, model_path, then = model, None, None
        if run is not None and model is not None and Path(model).is_dir():  # a folder, as `docstream run` takes it
            model_path, model_id = str(Path(model).resolve()), Path(model).resolve().name
        if run is not None and model is not None and service in ("chunker", "inference") and not new_group:
            def then(plan: Any) -> int:
                return replay_run(settings, Path(run.run.state_dir), plan, model_path=model_path, console=console,
                                  own_broker=run.state_dir is not None, timeout_s=timeout)
        return module.run_replay(
            settings, service=service, console=console, confirm=_confirm, to_datetime=to_datetime,
            to_offset=to_offset, new_group=new_group, model_id=model_id, task=task, lane=lane, force=force, yes=yes,
            dry_run=dry_run, then=then)

    raise typer.Exit(_run_tool(config, state_dir, _replay, broker=True))


sink_app = typer.Typer(help="Sinks: keep an external vector store in step with the completed documents "
                       "(docs/sinks.md).", no_args_is_help=True)
app.add_typer(sink_app, name="sink")
_SinkNameArg = typer.Argument(help="The sink: its name under [sinks.NAME] in the settings.")


@sink_app.command("run")
def sink_run(
    name: Annotated[str, _SinkNameArg],
    config: str | None = _ConfigOpt, metrics_port: int | None = _MetricsPortOpt,
    metrics_host: str | None = _MetricsHostOpt,
) -> None:
    """Run a sink: completed topic → its engine (upserts by point id, deletes of retired chunks)."""
    settings = _settings(config, metrics={"host": metrics_host, "port": metrics_port})
    from docstream_sink import main as sink
    _exit_now(int(sink.main(settings, name)))


@sink_app.command("verify")
def sink_verify(
    name: Annotated[str, _SinkNameArg],
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant whose points are compared.")] = "default",
    repair: Annotated[bool, typer.Option("--repair", help="Fix what is found: upsert the missing, stale and "
                                         "mismatched points, delete the extra ones.")] = False,
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """Compare a sink with the store's current chunks: missing, extra, stale version, vector mismatch.

    Exit status: 0 in step (or repaired), 1 differences left, 2 bad input."""
    from docstream_cli.ops import sink_verify as module
    raise typer.Exit(_run_tool(config, state_dir, lambda settings, console: module.verify_command(
        settings, name, tenant=tenant, repair=repair, console=console)))


dlq_app = typer.Typer(help="Inspect dead-letter topics and send records back (docs/replay.md).", no_args_is_help=True)
app.add_typer(dlq_app, name="dlq")
_DlqTopicArg = typer.Argument(help="A DLQ topic, or the topic whose .dlq to use.")


@dlq_app.command("list")
def dlq_list(
    topic: Annotated[str, _DlqTopicArg], config: str | None = _ConfigOpt, state_dir: str | None = _StateDirOpt
) -> None:
    """Count dead letters per original topic and error code, with their offsets."""
    from docstream_cli.ops import dlq as module
    raise typer.Exit(_run_tool(config, state_dir, lambda settings, console, _run: module.run_dlq_list(
        settings, topic, console=console), broker=True))


@dlq_app.command("show")
def dlq_show(
    topic: Annotated[str, _DlqTopicArg],
    count: Annotated[int, typer.Option("-n", help="How many records.")] = 10,
    partition: Annotated[int | None, typer.Option("--partition", help="Only this DLQ partition.")] = None,
    offset: Annotated[int | None, typer.Option("--offset", help="Start here (needs --partition).")] = None,
    max_bytes: Annotated[int, typer.Option("--max-bytes", help="Bytes of an undecodable value shown.")] = 64,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table.")] = False,
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """Show records: headers, and the decoded value (or a hex preview); long fields are shortened."""
    from docstream_cli.ops import dlq as module
    raise typer.Exit(_run_tool(config, state_dir, lambda settings, console, _run: module.run_dlq_show(
        settings, topic, console=console, count=count, partition=partition, offset=offset, max_bytes=max_bytes,
        as_json=as_json), broker=True))


@dlq_app.command("replay")
def dlq_replay(
    topic: Annotated[str, _DlqTopicArg],
    everything: Annotated[bool, typer.Option("--all", help="Every record not replayed yet.")] = False,
    partition: Annotated[int | None, typer.Option("--partition", help="Only this DLQ partition.")] = None,
    from_offset: Annotated[int | None, typer.Option("--from-offset", help="Only offsets >= this.")] = None,
    to_offset: Annotated[int | None, typer.Option("--to-offset", help="Only offsets <= this.")] = None,
    error_code: Annotated[str | None, typer.Option("--error-code", help="Only this error_code.")] = None,
    again: Annotated[bool, typer.Option("--again", help="Include records replayed before.")] = False,
    to: Annotated[str | None, typer.Option("--to", help="Send to this topic instead of original_topic.")] = None,
    yes: bool = _YesOpt,
    dry_run: bool = _DryRunOpt,
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """Send chosen dead letters back to their original topic (key and partition kept)."""
    from docstream_cli.ops import dlq as module
    from docstream_cli.ops.dlq_plan import DlqSelection
    selection = DlqSelection(partition=partition, from_offset=from_offset, to_offset=to_offset,
                             error_code=error_code, again=again)
    raise typer.Exit(_run_tool(config, state_dir, lambda settings, console, _run: module.run_dlq_replay(
        settings, topic, console=console, confirm=_confirm, selection=selection, everything=everything, target=to,
        yes=yes, dry_run=dry_run), broker=True))


@app.command()
def search(
    text: Annotated[str, typer.Argument(help="What to look for.")],
    job: Annotated[str | None, typer.Option("--job", help="Only this job's chunks.")] = None,
    k: Annotated[int, typer.Option("-k", help="How many results.")] = 10,
    model: Annotated[str | None, typer.Option("--model", help="Rows of this model_id (default: inference's).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON array instead of a table.")] = False,
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """The chunks nearest to TEXT: the query is embedded with the rows' model (docs/replay.md)."""
    from docstream_cli.ops import search as module
    raise typer.Exit(_run_tool(config, state_dir, lambda settings, console: module.run_search(
        settings, text, console=console, k=k, job_id=job, model_id=model, as_json=as_json)))


@app.command()
def delete(
    sources: Annotated[list[str], typer.Argument(help="Documents by their source: paths as they were submitted, "
                                                 "or URIs (s3://..., file:///...).")],
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant whose sources they are.")] = "default",
    yes: bool = _YesOpt,
    config: str | None = _ConfigOpt,
    state_dir: str | None = _StateDirOpt,
) -> None:
    """Delete documents by their source: every version's chunks, vectors and results leave the store, and a
    tombstone on the intake topic tells the sinks (docs/intake.md "Deleting a source"). Exit 0 deleted,
    2 unknown, 1 still in flight."""
    from docstream_cli.ops import delete as module
    raise typer.Exit(_run_tool(config, state_dir, lambda settings, console: module.delete_command(
        settings, sources, tenant=tenant, console=console, confirm=None if yes else _confirm,
        # a tombstone goes to the Kafka the settings name; a docstream run's broker is gone with its run
        publish="kafka" in _settings(config).model_fields_set)))


@app.command()
def run(
    paths: Annotated[list[str], typer.Argument(help="Files, folders (walked) and .zip/.tar/.tar.gz archives.")],
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Write results here: results.jsonl or results.parquet.")
    ] = ".docstream/results.jsonl",
    model: Annotated[
        str | None, typer.Option("--model", help="A local sentence-transformers folder; default: the bundled model.")
    ] = None,
    model_id: Annotated[str | None, typer.Option("--model-id", help="Name recorded with the results.")] = None,
    chunk_tokens: Annotated[int | None, typer.Option("--chunk-tokens", help="Most tokens per chunk.")] = None,
    chunks: Annotated[
        bool, typer.Option("--chunks", help="Also write every chunk (text, pages, token count, vector) to --out.")
    ] = False,
    state_dir: Annotated[str, typer.Option("--state-dir", help="Where the embedded stack keeps its state.")] = (
        ".docstream"
    ),
    timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after N seconds.")] = None,
    task: list[str] | None = _TaskOpt,
    labels: str | None = _LabelsOpt,
    prompt: str | None = _PromptOpt,
    prompt_file: str | None = _PromptFileOpt,
    schema: str | None = _SchemaOpt,
    config: str | None = _ConfigOpt,
) -> None:
    """Run the whole pipeline in this process on the embedded stack (Kafka, SQLite, a local folder).

    Re-running the same command resumes: documents already embedded are not computed again.
    Afterwards `docstream status|results|search` in this folder (or with --state-dir) read this run's store.
    Exit status: 0 all documents completed, 1 some failed, 2 error, 130 interrupted.
    """
    from pathlib import Path

    from docstream_cli.ops.submit import PromptFlags
    from docstream_cli.runner import run_command

    _passive_openmp()  # before the model's torch loads
    settings = _settings(config)
    inference: dict[str, Any] = {}
    if model is not None:
        inference["model_path"] = model
        inference["model_id"] = model_id or Path(model).name
    elif model_id is not None:
        inference["model_id"] = model_id
    overrides: dict[str, dict[str, Any]] = {"inference": inference} if inference else {}
    if chunk_tokens is not None:
        overlap = min(settings.chunker.overlap_tokens, max(0, chunk_tokens // 8))
        overrides["chunker"] = {"max_tokens": chunk_tokens, "overlap_tokens": overlap}
    if overrides:
        settings = settings.with_overrides(**overrides)
    code = run_command(paths, settings=settings, out=Path(out) if out else None, state_dir=Path(state_dir),
                       timeout_s=timeout, chunks=chunks, tasks=task or (), labels=labels,
                       prompt=PromptFlags(prompt, prompt_file, schema))
    # Results are exported, the store and the broker closed, the summary printed. What is left is the
    # interpreter's teardown of torch and of the threads libraries leave behind (~1.5 s): not waited for.
    _exit_now(code)
