"""`docstream apikey create|revoke`: API keys of the HTTP intake API; typer parsing stays in docstream_cli.app.

`apikey create` prints the new key alone on the first line of stdout (scripts:
`KEY=$(docstream apikey create --tenant acme | head -1)`); only its hash is stored, so it is shown this once.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from rich.console import Console

from docstream.errors import DocstreamError
from docstream.ids import validate_id
from docstream.logging import configure_logging
from docstream.records import utc_now
from docstream.service import EXIT_FAILED, EXIT_OK
from docstream.settings import load_settings
from docstream.store import open_store
from docstream.store.base import ApiKeyRow
from docstream_ingest.apikeys import generate_api_key, key_id_of

__all__ = ["apikey_create_command", "apikey_revoke_command"]


def apikey_create_command(*, tenant: str, name: str | None = None, config: str | None = None) -> int:
    """Run `docstream apikey create`: store the hash of a new key, print the key once."""
    errors = Console(stderr=True)
    try:
        settings = load_settings(config)
        configure_logging(level="WARNING", fmt=settings.log.format, service="apikey")
        validate_id(tenant, "tenant")
        new = generate_api_key()
        store = open_store(settings.store, settings.cassandra)
        try:
            store.migrate()
            store.upsert_api_key(
                ApiKeyRow(key_id=new.key_id, tenant=tenant, key_hash=new.key_hash, created_at=utc_now(), name=name)
            )
        finally:
            store.close()
    except DocstreamError as exc:
        errors.print(f"error [{exc.code}]: {exc.message}", highlight=False, markup=False)
        return EXIT_FAILED
    sys.stdout.write(new.key + "\n")
    sys.stdout.flush()
    errors.print(
        f"API key {new.key_id} for tenant {tenant}. It is shown only now: only its hash is stored.", highlight=False
    )
    return EXIT_OK


def apikey_revoke_command(*, key: str, config: str | None = None) -> int:
    """Run `docstream apikey revoke KEY_ID_OR_KEY`: the key stops working (within api.auth_cache_s)."""
    errors = Console(stderr=True)
    key_id = key_id_of(key) or key
    try:
        settings = load_settings(config)
        configure_logging(level="WARNING", fmt=settings.log.format, service="apikey")
        store = open_store(settings.store, settings.cassandra)
        try:
            store.migrate()
            row = store.get_api_key(key_id)
            if row is None:
                errors.print(f"error [api_key_not_found]: no API key {key_id}", highlight=False, markup=False)
                return EXIT_FAILED
            if row.revoked_at is None:
                store.upsert_api_key(replace(row, revoked_at=utc_now()))
        finally:
            store.close()
    except DocstreamError as exc:
        errors.print(f"error [{exc.code}]: {exc.message}", highlight=False, markup=False)
        return EXIT_FAILED
    errors.print(f"API key {key_id} of tenant {row.tenant} is revoked.", highlight=False)
    return EXIT_OK
