"""Request bodies of POST /v1/jobs, read bounded: size counted while the body streams in.

Uploaded files go to spooled temporary files (in memory up to 1 MiB, then on disk), so an
upload is never held in memory whole; the byte limit is enforced on the raw body as it
arrives, before the multipart parser sees it, and announced sizes (Content-Length) are
refused before anything is read.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from docstream.errors import InputError
from docstream.ids import check_source_key
from docstream.tenants.json_input import MAX_JSON_DEPTH, json_depth, loads_bounded
from docstream_ingest.api.errors import ApiError
from docstream_ingest.api.schemas import MAX_FORM_FIELD_BYTES, JobOptionsIn
from docstream_ingest.intake import Upload

__all__ = ["MultipartBody", "read_json", "read_multipart", "validation_error"]

_MAX_FIELD_BYTES = MAX_FORM_FIELD_BYTES
_MAX_FIELDS = 16
_MAX_FILENAME = 255
_FILES_FIELD = "files"
_SOURCE_KEYS_FIELD = "source_keys"
_OPTION_FIELDS = frozenset(JobOptionsIn.model_fields)
_JSON_FIELDS = frozenset({"tasks"})


@dataclass
class MultipartBody:
    """The uploads and the options of a multipart request; ``close()`` removes the spooled files."""

    uploads: list[Upload]
    options: JobOptionsIn
    form: FormData | None = field(default=None, repr=False)

    async def close(self) -> None:
        """Close (and so delete) the spooled upload files."""
        if self.form is not None:
            await self.form.close()


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "upload_too_large", f"the request body is larger than {limit} bytes (api.max_upload_bytes)")


async def _bounded(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:
        raise _too_large(limit)
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise _too_large(limit)
        yield chunk


def validation_error(exc: ValidationError) -> ApiError:
    """A pydantic ValidationError of a body as a 422 ``invalid_request``."""
    details = [
        {"loc": [str(part) for part in error["loc"]], "msg": error["msg"]} for error in exc.errors(include_url=False)
    ]
    first = details[0] if details else {"loc": [], "msg": "invalid body"}
    where = ".".join(first["loc"])
    return ApiError(422, "invalid_request", f"{where}: {first['msg']}" if where else str(first["msg"]),
                    extra={"details": details})


def _parse_model(model: type[BaseModel], data: Any, *, json: bool) -> Any:
    try:
        return model.model_validate_json(data) if json else model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from exc


async def read_json(request: Request, limit: int, model: type[BaseModel]) -> Any:
    """The JSON body validated by ``model``, read up to ``limit`` bytes.

    Raises:
        ApiError: 413 past ``limit``; 422 ``invalid_request`` for malformed or invalid JSON, or JSON nested deeper
            than ``MAX_JSON_DEPTH``.
    """
    raw = b"".join([chunk async for chunk in _bounded(request, limit)])
    _check_depth(raw)
    return _parse_model(model, raw, json=True)


def _check_depth(raw: bytes) -> None:
    """Refuse a body nested deeper than ``MAX_JSON_DEPTH`` before pydantic parses it: the free-form members (a
    prompt's ``json_schema``) would otherwise carry the nesting on to code that recurses over it."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:  # the common body: no need to walk it
        return
    depth = json_depth(raw.decode("utf-8", "replace"))
    if depth > MAX_JSON_DEPTH:
        raise ApiError(422, "invalid_request",
                       f"the request body nests {depth} levels deep, more than {MAX_JSON_DEPTH}")


def _filename(raw: str | None, index: int) -> str:
    # the sender's name is a label, never a path: keep its last component, printable characters only
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()[:_MAX_FILENAME]
    return name if name not in ("", ".", "..") else f"upload-{index}"


def _source_keys(raw: str | None, uploads: list[Upload]) -> list[Upload]:
    """``uploads`` with the source keys of the ``source_keys`` field: a JSON object from a file's name (as the job
    lists it) to its source key."""
    if raw is None:
        return uploads
    try:
        keys = loads_bounded(raw, what="source_keys", code="invalid_request")
    except InputError as exc:
        raise ApiError(422, exc.code, exc.message) from exc
    if not isinstance(keys, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
        raise ApiError(422, "invalid_request", "source_keys: a JSON object from file name to source key")
    names = {upload.filename for upload in uploads}
    unknown = sorted(set(keys) - names)
    if unknown:
        raise ApiError(422, "invalid_request", f"source_keys names files the request does not hold: {unknown[:5]}")
    for name, key in keys.items():
        try:
            check_source_key(key)
        except InputError as exc:
            raise ApiError(422, exc.code, f"source_keys[{name!r}]: {exc.message}") from exc
    # one source, one version per request: two files of one key would both follow its current version (a fork)
    named = [upload.filename for upload in uploads if upload.filename in keys]
    twice = sorted({name for name in named if named.count(name) > 1})
    if twice:
        raise ApiError(422, "duplicate_source_key", f"two files are named {twice[0]!r} (after their folders are taken "
                                                    "off): each file given a source key needs a name of its own")
    shared = len(set(keys.values())) < len(keys)
    if shared:
        raise ApiError(422, "duplicate_source_key", "source_keys gives one source key to two files: a source has "
                                                    "one version a request")
    return [replace(upload, source_key=keys.get(upload.filename)) for upload in uploads]


def _collect(form: FormData) -> tuple[list[Upload], dict[str, str]]:
    uploads: list[Upload] = []
    fields: dict[str, str] = {}
    source_keys: str | None = None
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name != _FILES_FIELD:
                raise ApiError(422, "invalid_request", f"unexpected file field {name!r}; send files as 'files'")
            uploads.append(Upload(_filename(value.filename, len(uploads)), value.file))
        elif name == _FILES_FIELD:
            raise ApiError(422, "invalid_request", "'files' must be file parts (with a filename)")
        elif name == _SOURCE_KEYS_FIELD:
            if source_keys is not None:
                raise ApiError(422, "invalid_request", f"form field {name!r} given twice")
            source_keys = value
        elif name not in _OPTION_FIELDS:
            raise ApiError(422, "invalid_request", f"unexpected form field {name!r}")
        elif name in fields:
            raise ApiError(422, "invalid_request", f"form field {name!r} given twice")
        else:
            fields[name] = value
    return _source_keys(source_keys, uploads), fields


def _decoded(fields: dict[str, str]) -> dict[str, Any]:
    """The form's option fields, those holding JSON (``tasks``) decoded."""
    decoded: dict[str, Any] = dict(fields)
    for name in _JSON_FIELDS & set(fields):
        try:
            decoded[name] = loads_bounded(fields[name], what=name, code="invalid_request")
        except InputError as exc:
            raise ApiError(422, exc.code, exc.message) from exc
    return decoded


async def read_multipart(request: Request, *, max_bytes: int, max_files: int) -> MultipartBody:
    """The uploads and options of a multipart/form-data body.

    Raises:
        ApiError: 413 ``upload_too_large``; 422 ``too_many_files`` past ``max_files`` file parts;
            422 ``no_documents`` without a file; 400 ``invalid_multipart`` for a malformed body;
            422 ``invalid_request`` for unknown or invalid fields.
    """
    parser = MultiPartParser(
        request.headers,
        _bounded(request, max_bytes),
        max_files=max_files,
        max_fields=_MAX_FIELDS,
        max_part_size=_MAX_FIELD_BYTES,
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        if "Too many files" in exc.message:
            raise ApiError(
                422, "too_many_files", f"more than {max_files} files in one request (api.max_files_per_job)"
            ) from exc
        raise ApiError(400, "invalid_multipart", exc.message) from exc
    body = MultipartBody([], JobOptionsIn.model_validate({}), form)
    try:
        uploads, fields = _collect(form)
        if not uploads:
            raise ApiError(422, "no_documents", "no file in the request: send one or more 'files' parts")
        body.uploads = uploads
        body.options = _parse_model(JobOptionsIn, _decoded(fields), json=False)
    except BaseException:
        await body.close()
        raise
    return body
