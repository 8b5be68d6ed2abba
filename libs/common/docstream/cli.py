"""The `docstream` command line: one entry point for every service and tool.

Commands import their service lazily so `docstream --help` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

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
