"""Writing systems: which script a text is in, and which Tesseract language reads it. Pure.

A character's script is the 256-code-point block it sits in (``SCRIPT_BLOCKS``): coarse at a few
shared blocks, exact enough to tell a page's scripts apart, and cheap (one ``bytes.translate``
over the text's UTF-16 high bytes, no per-character Python). ``docstream_chunker.page_quality`` counts a
page's word letters by script with it, and ``claimed_language`` turns those counts into the
Tesseract language of the script the text is written in: the page's own script, which the
chunker OCRs it in (docs/chunking.md "OCR in the page's script").

``judged_text`` is what a text looks like once the code points that do not change what it says
are folded: NFKC (Arabic presentation forms to letters, full-width Latin to ASCII, ligatures
like U+FB01 to ``fi``) and the invisible format characters that extraction passes on (zero-width
joiners and spaces, soft hyphens, bidi marks) removed. Verdicts judge that; stored text stays
exactly what the document holds.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping

__all__ = [
    "CJK_LANGUAGES",
    "CJK_SCRIPTS",
    "LANGUAGE_SCRIPTS",
    "OSD_LANGUAGES",
    "SCRIPT_BLOCKS",
    "SCRIPT_LANGUAGE",
    "TRADITIONAL_MARKERS",
    "claimed_language",
    "font_script",
    "judged_text",
    "language_scripts",
    "letters_by_script",
    "ocr_languages",
    "osd_language",
    "script_of_language",
]

SCRIPT_BLOCKS: dict[str, tuple[int, ...]] = {
    "Latin": (0x00, 0x01, 0x02, 0x1E, 0x2C, 0xA7),
    "Greek": (0x03, 0x1F),
    "Cyrillic": (0x04,),
    "Hebrew": (0x05,),
    "Arabic": (0x06, 0x07, 0x08, 0xFB, 0xFC, 0xFD, 0xFE),
    "Devanagari": (0x09,),
    "Thai": (0x0E,),
    "Hangul": (0x11, 0x31, *range(0xAC, 0xD8)),
    "Kana": (0x30,),
    "Han": (*range(0x34, 0xA0), 0xF9, 0xFA, 0xFF),
}
"""Script → the high bytes of its 256-code-point blocks (0x05: Cyrillic Supplement and Armenian
count as Hebrew; 0x00-0x02 beyond ASCII are the non-ASCII Latin letters of legacy 8-bit fonts and
of glyph ids read as code points)."""
SCRIPT_IDS: dict[str, int] = {script: i + 1 for i, script in enumerate(SCRIPT_BLOCKS)}
"""Script → its id in ``BLOCK_TABLE`` (0: no script)."""
BLOCK_TABLE = bytes(
    next((i + 1 for i, blocks in enumerate(SCRIPT_BLOCKS.values()) if block in blocks), 0) for block in range(256)
)
"""High byte of a UTF-16 code unit → script id, for ``bytes.translate``."""
CJK_SCRIPTS: frozenset[str] = frozenset({"Han", "Kana", "Hangul"})
"""Scripts written without spaces between words (Hangul has spaces, but one syllable is a word's worth)."""

_LATIN = ("Latin",)
_CYRILLIC = ("Cyrillic",)
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        "afr cat ces cym dan deu eng est eus fin fra gle glg hrv hun ind isl ita lat lav lit msa nld nor pol por "
        "ron slk slv spa sqi swa swe tgl tur vie".split(),
        _LATIN,
    ),
    **dict.fromkeys("bel bul kaz kir mkd mon rus srp tat tgk ukr uzb_cyrl".split(), _CYRILLIC),
    "ell": ("Greek",),
    "chi_sim": ("Han",),
    "chi_tra": ("Han",),
    "jpn": ("Han", "Kana"),
    "kor": ("Hangul", "Han"),
    **dict.fromkeys("ara fas urd pus".split(), ("Arabic",)),
    **dict.fromkeys("heb yid".split(), ("Hebrew",)),
    **dict.fromkeys("hin mar nep san".split(), ("Devanagari",)),
    "tha": ("Thai",),
}
"""Tesseract language code → the scripts its text is written in (unknown codes: Latin)."""
SCRIPT_LANGUAGE: dict[str, str] = {
    "Latin": "eng", "Cyrillic": "rus", "Greek": "ell", "Arabic": "ara", "Hebrew": "heb", "Devanagari": "hin",
    "Thai": "tha", "Hangul": "kor", "Kana": "jpn", "Han": "chi_sim",
}
"""Script → the Tesseract language that reads it when the document's languages name none of that script."""

CLAIM_SHARE = 0.5
"""A text claims a script when that script's word letters (and Latin ones, which every script's pages hold) are
at least this share of its letter-bearing characters."""
NON_LATIN_SHARE = 0.25
"""A non-Latin script outweighs Latin from this share of the word letters (Latin terms fill technical pages)."""
KANA_SHARE = 0.05
"""Han text with at least this share of Kana among its Han and Kana letters is Japanese."""
HANGUL_SHARE = 0.2
"""Han text with at least this share of Hangul among its Han and Hangul letters is Korean."""
TRADITIONAL_MARKERS = frozenset(
    "們這國學來說時個為會後對還長開關門問間發現東車書電話聽見頭體經過進運動實際認識從應該點數據種區義變處區"
    "樂歡讓當與幾舊歲"
)
"""Frequent characters written differently in traditional Chinese: Han text holding more of them
than of their simplified forms (``_SIMPLIFIED_MARKERS``) is ``chi_tra``."""
_SIMPLIFIED_MARKERS = frozenset(
    "们这国学来说时个为会后对还长开关门问间发现东车书电话听见头体经过进运动实际认识从应该点数据种区义变处区"
    "乐欢让当与几旧岁"
)
_INVISIBLE = dict.fromkeys(
    map(ord, "\u00ad\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff")
)


def judged_text(text: str) -> str:
    """``text`` as verdicts judge it: NFKC, without zero-width, soft-hyphen and bidi format characters."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFKC", text.translate(_INVISIBLE))


def letters_by_script(letters: str) -> dict[str, int]:
    """How many of ``letters`` fall in each script's blocks (characters of no script are left out)."""
    ids = letters.encode("utf-16-le")[1::2].translate(BLOCK_TABLE)
    return {script: n for script, i in SCRIPT_IDS.items() if (n := ids.count(i))}


def language_scripts(languages: Iterable[str]) -> frozenset[str]:
    """The scripts of ``languages`` (Tesseract codes) by ``LANGUAGE_SCRIPTS``; Latin when none is known."""
    scripts = {script for code in languages for script in LANGUAGE_SCRIPTS.get(code.strip().lower(), ())}
    return frozenset(scripts or _LATIN)


def script_of_language(language: str) -> str:
    """The main script of ``language``: the first of ``LANGUAGE_SCRIPTS`` (``kor``: Hangul; unknown: Latin)."""
    return LANGUAGE_SCRIPTS.get(language, _LATIN)[0]


def claimed_language(counts: Mapping[str, int], letter_bearing: int, *, han_text: str = "") -> str | None:
    """The Tesseract language of the script a text is written in, or None when it claims none.

    The script is the non-Latin one with the most word letters when it holds ``NON_LATIN_SHARE``
    of them, else Latin; Han is Japanese with Kana beside it, Korean with Hangul beside it,
    traditional Chinese when ``han_text`` holds more ``TRADITIONAL_MARKERS`` than simplified
    ones. A text claims its script only when that script's letters make ``CLAIM_SHARE`` of its
    letter-bearing characters: garbage claims nothing.

    Args:
        counts: word letters per script (``letters_by_script`` of the text's word-like tokens;
            the caller leaves out the non-ASCII Latin of script mismatches).
        letter_bearing: the text's characters in tokens that are not numbers or punctuation alone.
        han_text: the text itself, to tell traditional from simplified Chinese.
    """
    total = sum(counts.values())
    if not total or not letter_bearing:
        return None
    others = {s: n for s, n in counts.items() if s != "Latin" and s not in CJK_SCRIPTS}
    cjk = sum(counts.get(s, 0) for s in CJK_SCRIPTS)
    if cjk:  # one writing system for the share: Japanese is Han and Kana, Korean Hangul and some Han
        others["Han"] = cjk
    script = max(others, key=lambda s: (others[s], s)) if others else "Latin"
    if script != "Latin" and others[script] < NON_LATIN_SHARE * total:
        script = "Latin"
    if script == "Han":
        han, kana, hangul = counts.get("Han", 0), counts.get("Kana", 0), counts.get("Hangul", 0)
        claimed = han + kana + hangul
        if hangul >= HANGUL_SHARE * (han + hangul):
            script = "Hangul"
        elif kana >= KANA_SHARE * (han + kana):
            script = "Kana"
        else:
            script = "Han"
    else:
        claimed = counts.get(script, 0)
    if script != "Latin":  # Latin terms read in every script's pages
        claimed += counts.get("Latin", 0)
    if claimed < CLAIM_SHARE * letter_bearing:
        return None
    if script == "Han" and han_text:
        traditional = sum(map(han_text.count, TRADITIONAL_MARKERS))
        if traditional > sum(map(han_text.count, _SIMPLIFIED_MARKERS)):
            return "chi_tra"
    return SCRIPT_LANGUAGE[script]


def ocr_languages(language: str, configured: Iterable[str], installed: Iterable[str]) -> tuple[str, ...] | None:
    """The Tesseract languages that read a page in ``language``'s script, or None when none is installed.

    The document's configured languages of that script come first (``deu`` for a Latin page,
    ``ukr`` for a Cyrillic one, ``chi_tra`` for Han), else ``language`` itself. No Latin language
    is added beside a non-Latin one: measured on generated pages (docs/chunking.md "OCR in the
    page's script"), ``kor+eng`` and ``ara+eng`` put English words where Hangul and Arabic were
    and reversed Arabic lines. A language whose data is not installed is never replaced by
    another script's.

    Args:
        language: the page's language (``claimed_language``, or a probe's pick).
        configured: ``chunker.ocr.languages``.
        installed: the languages the engine has data for.
    """
    have = frozenset(installed)
    configured = tuple(configured)
    if language not in LANGUAGE_SCRIPTS:  # a code or script this table does not know: only itself reads it
        return (language,) if language in have else None
    scripts = frozenset(LANGUAGE_SCRIPTS[language])
    own = [code for code in configured if script_of_language(code) in scripts and code in have]
    if language == "jpn" or language == "kor":  # their data reads Han as well: the configured Chinese is not theirs
        own = [code for code in own if code == language]
    if not own:
        if language not in have:
            return None
        own = [language]
    return tuple(dict.fromkeys(own))


def trial_languages(language: str, configured: Iterable[str], installed: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    """What reads each script other than ``language``'s that the engine has data for (``ocr_languages`` of it), in
    ``SCRIPT_LANGUAGE``'s order, each once: the scripts a page is tried in when nothing else names its script.

    Args:
        language: the language the page was read in.
        configured: ``chunker.ocr.languages``.
        installed: the languages the engine has data for.
    """
    have = frozenset(installed)
    mine = ocr_languages(language, configured, have)
    found: dict[tuple[str, ...], None] = {}
    for script, reads in SCRIPT_LANGUAGE.items():
        languages = ocr_languages(reads, configured, have)
        if languages is not None and languages != mine and script != script_of_language(language):
            found.setdefault(languages)
    return tuple(found)


OSD_LANGUAGES: dict[str, str] = {
    "Latin": "eng", "Cyrillic": "rus", "Greek": "ell", "Arabic": "ara", "Hebrew": "heb", "Devanagari": "hin",
    "Han": "chi_sim", "HanS": "chi_sim", "HanT": "chi_tra", "Japanese": "jpn", "Korean": "kor", "Hangul": "kor",
    "Thai": "tha",
}
"""Tesseract OSD's script names → the language that reads them (other OSD scripts have none here)."""
CJK_LANGUAGES: frozenset[str] = frozenset({"chi_sim", "chi_tra", "jpn", "kor"})
"""Languages whose scripts OSD tells apart least well: an OCR reading's own claim settles it."""


def osd_language(script: str) -> str | None:
    """The Tesseract language for an OSD script name (``Arabic`` → ``ara``), None for a script without one."""
    return OSD_LANGUAGES.get(script)


_FONT_SCRIPTS: tuple[tuple[re.Pattern[str], str], ...] = (
    # TeX's LH fonts in T2A, T2B, T2C and X2 (larm1000, labx1200): the encoding's letters, then Computer Modern's
    (re.compile(r"(l[abc]|rx)(rm|bx|ti|sl|tt|ss|cc|sx|si|it|bi|bl|ui|dh|fi|ff|vt|tl|tc|sc|xc|b|i)[a-z]{0,2}\d{4}"),
     "Cyrillic"),
    (re.compile(r"wncy[a-z]{1,2}\d{1,2}"), "Cyrillic"),  # TeX's OT2 Washington Cyrillic (wncyr10)
    (re.compile(r"gr[a-z]{2}\d{4}"), "Greek"),  # TeX's LGR fonts of cbgreek (grmn1000)
    (re.compile(r".*[a-z](cyr|cyrillic)"), "Cyrillic"),  # code-page fonts: Times New Roman Cyr, Arial Cyr
    (re.compile(r".*[a-z]greek"), "Greek"),  # Arial Greek, Times New Roman Greek
    (re.compile(r".*[a-z]hebrew"), "Hebrew"),
    (re.compile(r".*[a-z]arabic"), "Arabic"),
    (re.compile(r".*(t2[abc]|x2|ot2)"), "Cyrillic"),  # a TeX encoding in the name (CMR10-T2A)
    (re.compile(r".*lgr"), "Greek"),
)
"""Font family names that say their glyphs' script, whatever the text layer maps them to (lower case, no spaces;
matched whole, the subset tag and the style after a hyphen or comma left out, then the name with its style)."""


def font_script(names: Iterable[str]) -> str | None:
    """The one script that the names of a page's fonts say (``_FONT_SCRIPTS``), or None when they say none or
    more than one.

    Old producers set Cyrillic and Greek in 8-bit fonts whose text layer reads as Latin-1 or maps to nothing:
    TeX's T2A, OT2 and LGR fonts, Windows' code-page fonts. Their names are the one part of such a layer that
    still tells the script.

    Args:
        names: the fonts' base names as a PDF gives them (``ABCDEF+LARM1000``, ``TimesNewRomanCyr,Bold``).
    """
    found: set[str] = set()
    for name in names:
        bare = name.rpartition("+")[2].replace(" ", "").lower()
        family = re.split(r"[-,]", bare, maxsplit=1)[0]
        for candidate in dict.fromkeys((family, bare)):
            script = next((script for pattern, script in _FONT_SCRIPTS if pattern.fullmatch(candidate)), None)
            if script is not None:
                found.add(script)
                break
    return found.pop() if len(found) == 1 else None
