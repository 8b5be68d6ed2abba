"""JobRequest: its checks (pure) and its job options."""

from __future__ import annotations

import dataclasses

import pytest

from docstream.errors import InputError
from docstream_ingest.request import JobRequest, validate_job_request

DEFAULT_MAX_TOKENS = 256


# -- validate_job_request ------------------------------------------------------------------


def _check(request: JobRequest) -> JobRequest:
    return validate_job_request(request, default_max_tokens=DEFAULT_MAX_TOKENS)


@pytest.mark.parametrize(
    "request_",
    [
        JobRequest(),
        JobRequest(job_id=""),  # empty: a new job, as None
        JobRequest(job_id="crawl-2024-09-30", tenant="acme.eu:prod@1"),
        JobRequest(chunk_max_tokens=8, chunk_overlap_tokens=7),
        JobRequest(chunk_max_tokens=8192, chunk_overlap_tokens=0),
        JobRequest(chunk_overlap_tokens=DEFAULT_MAX_TOKENS - 1),
        JobRequest(webhook_url="https://hooks.example.com/done"),
        JobRequest(webhook_url="HTTP://hooks.example.com/done"),
        JobRequest(model_id="intfloat/e5-small@v2", atomic=True),
    ],
    ids=repr,
)
def test_a_valid_request_is_returned_as_it_is(request_: JobRequest) -> None:
    assert _check(request_) is request_


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (JobRequest(job_id="../../etc"), "invalid_job_id"),
        (JobRequest(job_id="-starts-with-a-dash"), "invalid_job_id"),
        (JobRequest(job_id="x" * 129), "invalid_job_id"),
        (JobRequest(tenant="a b"), "invalid_tenant"),
        (JobRequest(tenant=""), "invalid_tenant"),
        (JobRequest(chunk_max_tokens=64, chunk_overlap_tokens=64), "invalid_chunk_options"),
        (JobRequest(chunk_max_tokens=7), "invalid_chunk_options"),
        (JobRequest(chunk_max_tokens=8193), "invalid_chunk_options"),
        (JobRequest(chunk_overlap_tokens=-1), "invalid_chunk_options"),
        (JobRequest(chunk_overlap_tokens=DEFAULT_MAX_TOKENS), "invalid_chunk_options"),  # below the default size
        (JobRequest(webhook_url="file:///etc/passwd"), "invalid_webhook_url"),
        (JobRequest(webhook_url="hooks.example.com/done"), "invalid_webhook_url"),
    ],
    ids=repr,
)
def test_an_invalid_request_is_refused_with_its_code(request_: JobRequest, code: str) -> None:
    with pytest.raises(InputError) as caught:
        _check(request_)
    assert caught.value.code == code


def test_checks_run_job_id_then_tenant_then_chunking_then_webhook() -> None:
    everything_wrong = JobRequest(
        job_id="bad id", tenant="bad tenant", chunk_max_tokens=1, webhook_url="ftp://example.com"
    )
    codes = []
    for fixed in ({"job_id": None}, {"tenant": "acme"}, {"chunk_max_tokens": None}, {"webhook_url": None}):
        with pytest.raises(InputError) as caught:
            _check(everything_wrong)
        codes.append(caught.value.code)
        everything_wrong = dataclasses.replace(everything_wrong, **fixed)
    assert codes == ["invalid_job_id", "invalid_tenant", "invalid_chunk_options", "invalid_webhook_url"]
    assert _check(everything_wrong) is everything_wrong


def test_the_default_chunk_size_is_the_one_given() -> None:
    request = JobRequest(chunk_overlap_tokens=100)
    assert validate_job_request(request, default_max_tokens=101) is request
    with pytest.raises(InputError):
        validate_job_request(request, default_max_tokens=100)


# -- JobRequest ---------------------------------------------------------------------------


def test_job_options_hold_only_the_options_given_as_strings() -> None:
    assert JobRequest(tenant="acme", webhook_url="https://example.com", atomic=True).job_options() == {}
    assert JobRequest(model_id="m-1", chunk_max_tokens=64, chunk_overlap_tokens=0).job_options() == {
        "model_id": "m-1",
        "chunk_max_tokens": "64",
        "chunk_overlap_tokens": "0",
    }


def test_a_request_is_frozen() -> None:
    request = JobRequest(tenant="acme")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.tenant = "other"  # type: ignore[misc]
