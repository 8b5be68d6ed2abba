"""The `docstream` command line: one entry point for every service and tool.

Commands import their service lazily so `docstream --help` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Annotated, Any

import typer

from docstream.settings import Settings, load_settings

__all__ = ["app"]

app = typer.Typer(name="docstream", help="Inference over large document jobs.", no_args_is_help=True)

_SERVICES = {
    "ingest": "docstream_ingest.main",
    "chunker": "docstream_chunker.main",
    "inference": "docstream_inference.main",
    "reducer": "docstream_reducer.main",
}


def _settings(config: str | None) -> Settings:
    return load_settings(config)


def _run_service(name: str, config: str | None) -> None:
    settings = _settings(config)
    module: Any = import_module(_SERVICES[name])
    raise typer.Exit(module.main(settings))


_ConfigOpt = typer.Option(None, "--config", "-c", help="TOML settings file (env vars still win).")


@app.command()
def chunker(config: str | None = _ConfigOpt) -> None:
    """Run the chunker service: intake topic → chunks topic."""
    _run_service("chunker", config)


@app.command()
def inference(config: str | None = _ConfigOpt) -> None:
    """Run the inference service: chunks topic → model → store → embedded topic."""
    _run_service("inference", config)


@app.command()
def reducer(config: str | None = _ConfigOpt) -> None:
    """Run the reducer service: embedded topic → completed documents and job progress."""
    _run_service("reducer", config)


@app.command()
def ingest(config: str | None = _ConfigOpt) -> None:
    """Run the ingest service (creates topics and the store schema, then serves the HTTP intake API)."""
    _run_service("ingest", config)


@app.command()
def submit(
    paths: Annotated[list[str], typer.Argument(help="Files, folders (walked) and .zip/.tar/.tar.gz archives.")],
    job_id: Annotated[str | None, typer.Option("--job-id", help="Job to submit to (new or existing).")] = None,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant owning the job.")] = "default",
    model: Annotated[str | None, typer.Option("--model", help="Model id for the job; default: the service's.")] = None,
    chunk_max_tokens: Annotated[int | None, typer.Option(help="Per-job chunk size in tokens.")] = None,
    chunk_overlap_tokens: Annotated[int | None, typer.Option(help="Per-job chunk overlap in tokens.")] = None,
    webhook: Annotated[str | None, typer.Option("--webhook", help="URL the reducer calls when the job ends.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait until the job is completed, with a progress bar.")] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", help="With --wait: give up after N seconds.")] = None,
    config: str | None = _ConfigOpt,
) -> None:
    """Submit documents: print the job id at once, then what was submitted and refused (docs/intake.md)."""
    module: Any = import_module("docstream_ingest.commands")
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
        )
    )
