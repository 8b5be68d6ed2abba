"""Mutation fuzz of the extraction path, driven through the chunker's own extraction child process.

Inputs are seeded byte mutations (tests.fixtures.mutation) of the fixtures' documents (PDFs, EPUB,
XPS, HTML, text, PNG) and archives (zip, tar, tar.gz). A document goes to a ``ProcessExtractor``, the
very child process the chunker uses, with its time limit and its memory recycling: a segfault or a
hang inside MuPDF shows as what it would be in production. An archive is expanded as the intake
expands it (``expand_archive``, every member read) and each member then goes to the same child.

What counts:

* an outcome per extraction: ``ok`` or the error code (``DocumentError``/``InputError``); a code
  that docs/chunking.md ("Failures") does not list, or any other exception, is ``untyped``;
* an archive's outcome: ``archive_ok`` or its ``InputError`` code (``ARCHIVE_ERROR_CODES``);
* crashes: the child died (``extractor_died``: a MuPDF crash, the OOM killer); kills: the child was
  killed at the time limit (``extractor_killed``, MuPDF stuck inside one page, or OCR on a loaded
  machine); hangs: an extraction that did not come back within the time limit (which does not grow
  with OCR pages here: ``fuzz_settings``) plus the kill grace, and a child's start where it started one;
* peak RSS: the largest ``VmHWM`` of any child, sampled every 0.1 s and after every extraction; and
  the child's ``VmRSS`` every 5,000 extractions (a slow growth shows there).
"""

from __future__ import annotations

import io
import re
import time
import zipfile
from collections import Counter
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymupdf
from structlog.testing import capture_logs

from docstream.errors import DocumentError, InputError
from docstream.ids import content_sha256
from docstream.objectstore import ObjectStore
from docstream.settings import Settings
from docstream_chunker.worker import KILL_GRACE_S, START_TIMEOUT_S, ChunkRequest, ProcessExtractor
from docstream_ingest.archives import ARCHIVE_ERROR_CODES, ArchiveKind, ArchiveLimits, expand_archive
from tests.chaos.harness import Sampler
from tests.fixtures.contexts import extractor_settings
from tests.fixtures.documents import (
    make_encrypted_pdf,
    make_epub,
    make_html_document,
    make_image_only_pdf,
    make_pdf,
    make_png,
    make_tar,
    make_text_document,
    make_xps,
    make_zero_page_pdf,
    make_zip,
)
from tests.fixtures.mutation import mutated_input
from tests.fixtures.services import ROOT

__all__ = ["DOCUMENT_ERROR_CODES", "FuzzFigures", "FuzzSeed", "extraction_fuzz", "fuzz_settings", "seed_corpus"]

# Beyond the extractor's own bounds (docstream_chunker.worker: the grace after the time limit before the kill, and
# the most a child's start may take, 1-3 s on an idle machine and ten times that beside three test workers on 2
# cores), the IPC and the result's transfer get the slack. A child killed or dead on one input starts again inside
# the next input's extraction, which may take that much longer.
_SLACK_S = 10.0
# what leaves the extractor with no child, so that the next extraction starts one
_LEAVE_NO_CHILD = frozenset({"extractor_killed", "extractor_died", "extractor_recycled"})
_MAX_INPUT_BYTES = 1 << 20
_RSS_TREND_EVERY = 5000


def _documented_codes() -> frozenset[str]:
    """The error codes of docs/chunking.md's "Failures" table: the contract an outcome must keep."""
    text = (ROOT / "docs" / "chunking.md").read_text()
    table = text.split("## Failures", 1)[1].split("\n#", 1)[0]
    return frozenset(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE))


DOCUMENT_ERROR_CODES = _documented_codes()


@dataclass(frozen=True)
class FuzzSeed:
    """One corpus entry: its bytes, the file name it is submitted under, and the archive kind if it is one."""

    name: str
    data: bytes
    filename: str
    archive: ArchiveKind | None = None


_FIXED_ID = "[<00112233445566778899aabbccddeeff><00112233445566778899aabbccddeeff>]"


def _canonical_pdf(pdf: bytes, *, expand: bool = False) -> bytes:
    """The same PDF without its dates and with a fixed /ID, so the corpus is the same bytes on every run.

    ``expand``: every stream decompressed, so content operators become mutable text.
    """
    doc = pymupdf.open(stream=pdf, filetype="pdf")
    try:
        doc.set_metadata({})
        doc.xref_set_key(-1, "ID", _FIXED_ID)
        if expand:
            return bytes(doc.tobytes(expand=255, deflate=False, no_new_id=True))
        return bytes(doc.tobytes(garbage=3, deflate=True, no_new_id=True))
    finally:
        doc.close()


def _canonical_zip(package: bytes) -> bytes:
    """The same zip package with fixed member times (EPUB and XPS makers stamp the current time)."""
    with zipfile.ZipFile(io.BytesIO(package)) as source:
        members = [(info, source.read(info)) for info in source.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info, data in members:
            target.writestr(zipfile.ZipInfo(info.filename, date_time=(2024, 1, 1, 0, 0, 0)), data,
                            compress_type=info.compress_type)
    return out.getvalue()


def seed_corpus() -> tuple[FuzzSeed, ...]:
    """Small documents of every kind the fixtures make, and archives of them.

    The same bytes on every run, but for the encrypted PDF (MuPDF salts its encryption at random).
    """
    pdf = _canonical_pdf(make_pdf(3, seed=11, toc=True, section_every=2).data)
    mixed = _canonical_pdf(make_pdf(2, seed=12, two_column_every=2, non_ascii=True, image_pages=(2,)).data)
    members = {"a.pdf": _canonical_pdf(make_pdf(1, seed=13).data),
               "notes.txt": make_text_document(seed=13, paragraph_count=3)}
    return (
        FuzzSeed("pdf", pdf, "doc.pdf"),
        FuzzSeed("pdf_plain", _canonical_pdf(pdf, expand=True), "doc.pdf"),
        FuzzSeed("pdf_mixed", mixed, "mixed.pdf"),
        FuzzSeed("pdf_mixed_plain", _canonical_pdf(mixed, expand=True), "mixed.pdf"),
        FuzzSeed("pdf_image_only", _canonical_pdf(make_image_only_pdf(1, seed=14)), "scan.pdf"),
        FuzzSeed("pdf_encrypted", make_encrypted_pdf(1, seed=15), "locked.pdf"),
        FuzzSeed("pdf_zero_pages", make_zero_page_pdf(), "empty.pdf"),
        FuzzSeed("epub", _canonical_zip(make_epub(seed=16, chapters=2, paragraph_count=3)), "book.epub"),
        FuzzSeed("xps", _canonical_zip(make_xps(seed=17, pages=1, lines_per_page=8)), "sheet.xps"),
        FuzzSeed("html", make_html_document(seed=18, paragraph_count=4), "page.html"),
        FuzzSeed("text", make_text_document(seed=19, paragraph_count=4), "notes.txt"),
        FuzzSeed("png", make_png(seed=20), "picture.png"),
        FuzzSeed("zip", make_zip(members), "bundle.zip", "zip"),
        FuzzSeed("tar", make_tar(members), "bundle.tar", "tar"),
        FuzzSeed("tar_gz", make_tar(members, gz=True), "bundle.tar.gz", "tar.gz"),
    )


@dataclass
class FuzzFigures:
    """What a campaign did and found."""

    seed: int
    inputs: int = 0
    extractions: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    archive_outcomes: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)
    crashes: int = 0
    kills: int = 0
    recycles: int = 0
    hangs: int = 0
    untyped: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    peak_rss_bytes: int = 0
    rss_trend_mib: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Figures for the report (plain JSON types, the largest counts first)."""
        return {
            "seed": self.seed, "inputs": self.inputs, "extractions": self.extractions,
            "outcomes": dict(self.outcomes.most_common()),
            "archive_outcomes": dict(self.archive_outcomes.most_common()),
            "mutations": dict(self.mutations.most_common()), "crashes": self.crashes, "kills": self.kills,
            "recycles": self.recycles, "hangs": self.hangs, "untyped": self.untyped[:20],
            "findings": self.findings[:20], "peak_rss_mib": round(self.peak_rss_bytes / 2**20, 1),
            "rss_mib_every_5000_extractions": self.rss_trend_mib,
            "seconds": round(self.seconds, 1), "inputs_per_s": round(self.inputs / max(self.seconds, 1e-9), 1),
        }


def fuzz_settings(root: Path, *, timeout_s: float) -> Settings:
    """Default settings with the objects under ``root`` and a short time limit (a hang costs less).

    The limit does not grow with OCR or layout pages (``max_timeout_s`` is ``timeout_s``): a mutated document
    whose pages go to OCR on a loaded machine is killed at it, an outcome (``timeout``) like any other, and the
    hang bound (``_Campaign.hang_after_s``) is the limit the child is really held to.
    """
    return Settings().with_overrides(
        object_store={"url": str(root / "objects"), "allowed_roots": [str(root / "objects")]},
        chunker={"timeout_s": timeout_s, "max_timeout_s": timeout_s, "max_pages": 500,
                 "max_document_bytes": 4 * _MAX_INPUT_BYTES},
    )


def _vm_kib(pid: int | None, field: str) -> int:
    """A /proc memory figure of process ``pid`` (``VmHWM``: the peak resident set, ``VmRSS``) in bytes; 0 if gone."""
    if pid is None:
        return 0
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(rf"^{field}:\s+(\d+) kB", status, flags=re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


class _Campaign:
    """One campaign's state: the extractor, the object store, the figures."""

    def __init__(
        self, settings: Settings, extractor: ProcessExtractor, figures: FuzzFigures,
        logs: list[MutableMapping[str, Any]],
        findings_dir: Path | None,
    ) -> None:
        self.settings = settings
        self.extractor = extractor
        self.logs = logs
        self.seen_logs = 0
        self.objects = ObjectStore(settings.object_store)
        self.figures = figures
        self.limits = ArchiveLimits.from_settings(settings.ingest)
        self.hang_after_s = settings.chunker.timeout_s + KILL_GRACE_S + _SLACK_S
        self.restarting = False  # the last extraction left the child to be started again by the next one
        self.findings_dir = findings_dir
        self.current = b""  # the input being tried, saved with a finding

    def found(self, label: str, code: str, error: str) -> None:
        """Keep a finding: the input's label (seed:index and its mutations), a code, what happened; save the input."""
        finding: dict[str, Any] = {"input": label, "code": code, "error": error[:300]}
        if self.findings_dir is not None:
            self.findings_dir.mkdir(parents=True, exist_ok=True)
            path = self.findings_dir / f"finding-{self.figures.seed}-{len(self.figures.findings):04d}.bin"
            path.write_bytes(self.current)
            finding["saved"] = str(path)
        self.figures.findings.append(finding)

    def peak(self) -> int:
        try:
            pid = self.extractor.pid
        except ValueError:  # the process object was closed under us: it is being replaced
            return self.figures.peak_rss_bytes
        self.figures.peak_rss_bytes = max(self.figures.peak_rss_bytes, _vm_kib(pid, "VmHWM"))
        return self.figures.peak_rss_bytes

    def extract(self, data: bytes, filename: str, label: str) -> str:
        """One extraction in the child; its outcome (``ok`` or the error code)."""
        sha = content_sha256(data)
        request = ChunkRequest(self.objects.put(data, sha), sha, 256, 32, filename=filename)
        started = time.monotonic()
        try:
            self.extractor.extract(request)
            outcome = "ok"
        except (DocumentError, InputError) as exc:
            outcome = exc.code if exc.code in DOCUMENT_ERROR_CODES else "untyped"
            if outcome == "untyped" or exc.code == "extraction_failed":
                self.found(label, exc.code, exc.message)
        except Exception as exc:  # the fuzz's point: anything else escaping the extractor is a finding
            outcome = "untyped"
            self.found(label, type(exc).__name__, str(exc))
        if outcome == "untyped":
            self.figures.untyped.append(label)
        elapsed = time.monotonic() - started
        events = self._child_events(label)
        # a child started again inside this extraction: the one the last extraction left, or one that died on this
        starts = int(self.restarting) + int("extractor_died" in events)
        if elapsed > self.hang_after_s + starts * START_TIMEOUT_S:
            self.figures.hangs += 1
            self.found(label, "hang", f"{elapsed:.0f} s")
        self.restarting = bool(events & _LEAVE_NO_CHILD)
        self.figures.extractions += 1
        self.figures.outcomes[outcome] += 1
        self.peak()
        if self.figures.extractions % _RSS_TREND_EVERY == 0:
            self.figures.rss_trend_mib.append(round(_vm_kib(self.extractor.pid, "VmRSS") / 2**20))
        return outcome

    def _child_events(self, label: str) -> set[str]:
        """What the extractor logged about its child during the last extraction (deaths, kills, recycling)."""
        events: set[str] = set()
        for entry in self.logs[self.seen_logs :]:
            event = entry.get("event")
            events.add(str(event))
            if event == "extractor_died":
                self.figures.crashes += 1
                self.found(label, "crash", f"exit {entry.get('exit_code')}")
            elif event == "extractor_killed":
                self.figures.kills += 1
                self.found(label, "killed", "past the time limit")
            elif event == "extractor_recycled":
                self.figures.recycles += 1
        self.seen_logs = len(self.logs)
        return events

    def expand(self, data: bytes, kind: ArchiveKind, label: str) -> None:
        """Expand an archive as the intake does; every member then goes to the child."""
        members: list[tuple[str, bytes]] = []
        try:
            for member in expand_archive(io.BytesIO(data), kind, self.limits):
                members.append((member.name, member.stream.read()))
            outcome = "archive_ok"
        except InputError as exc:
            outcome = exc.code if exc.code in ARCHIVE_ERROR_CODES else "untyped"
        except Exception as exc:  # anything but InputError escaping expand_archive is a finding
            outcome = "untyped"
            self.found(label, type(exc).__name__, str(exc))
        if outcome == "untyped":
            self.figures.untyped.append(label)
        self.figures.archive_outcomes[outcome] += 1
        for name, content in members:
            if content:  # the intake refuses empty members (code empty) before any chunker sees them
                self.extract(content, name, f"{label}/{name}")


def extraction_fuzz(
    settings: Settings,
    *,
    seed: int,
    budget_s: float,
    max_inputs: int,
    corpus: tuple[FuzzSeed, ...] | None = None,
    findings_dir: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FuzzFigures:
    """Run mutated inputs through the extraction child until ``budget_s`` is spent or ``max_inputs`` are tried.

    Input ``i`` is ``mutated_input(seed, i, ...)``: a finding is rebuilt from its label (``seed:index``);
    with ``findings_dir`` its bytes are also saved there.
    """
    seeds = corpus if corpus is not None else seed_corpus()
    datas = [s.data for s in seeds]
    figures = FuzzFigures(seed=seed)
    started = clock()
    with capture_logs() as logs, ProcessExtractor(extractor_settings(settings)) as extractor:
        campaign = _Campaign(settings, extractor, figures, logs, findings_dir)
        with Sampler(campaign.peak, interval_s=0.1):
            index = 0
            while index < max_inputs and clock() - started < budget_s:
                base, names, data = mutated_input(seed, index, datas, max_bytes=_MAX_INPUT_BYTES)
                chosen = seeds[base]
                label = f"{seed}:{index} ({chosen.name}: {'+'.join(names)})"
                figures.mutations.update(names)
                campaign.current = data
                if chosen.archive is not None:
                    campaign.expand(data, chosen.archive, label)
                elif data:
                    campaign.extract(data, chosen.filename, label)
                index += 1
            figures.inputs = index
    figures.seconds = clock() - started
    return figures
