"""The one place where a stored category gets its failure class and its ``interrupting`` flag.

Readers store the category text as the source wrote it (``events.category``: a canonical file's
"Faulty GPU", a kernel log's class name, a scheduler's reason text) and, when the source itself
says whether the event stops a job (an Xid code's catalog entry), that flag in ``interrupting``;
otherwise NULL. After each file, inside its transaction, :func:`classify_new_events` gives every
event without a class (``failure_class`` NULL: the file's new events) its class and effective flag
(the canonical reader, given the map, stores its rows classified by the same rules: updating
millions of rows it has just written costs more than joining their few categories as it writes):

* class: the user's map (:class:`pipeline.categories.CategoryMap`), else the built-in synonyms
  (:data:`pipeline.categories.SYNONYMS`), else an ``Xid N`` / ``SXid N`` in the text (the Xid
  catalog's class; SXid: ``nvlink``), else the words of the name (:func:`class_by_words`: "NVLink
  error" is ``nvlink``; named in a note per file, so a wrong guess is seen and mapped), else
  ``other``: unknown, counted as interrupting, and named with its count in one note per file;
* interrupting: the user's entry for the category, else for its class; else the source's own flag
  (kept in ``source_interrupting``); else the Xid catalog's for an ``Xid N`` text; else the class's.

The map is part of what the warehouse was built with: :func:`apply_category_map` reclassifies every
stored event when it differs from the map of the last build (``incidents_built.category_map``);
re-running with the same map changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

import polars as pl

from pipeline import xid as xid_catalog
from pipeline.categories import (
    QUALIFIER_WORDS,
    SYNONYMS,
    VAGUE_WORDS,
    CategoryMap,
    FailureCategory,
    class_named,
    normal_form,
)
from pipeline.store.files import registered

# "Xid 79", "XID_48", "sxid 12028"; not inside a word ("Maxidle"), except an upper-case XID after a
# lower-case letter, as in the EKS node monitoring agent's reasons "NvidiaXID79Error"
_XID_IN_TEXT = re.compile(
    r"(?:(?<![a-z])|(?<=[a-z])(?-i:(?=S?XID)))(s?)xid[^a-z0-9]{0,3}(\d{1,5})(?!\d)", re.IGNORECASE
)
_BUILT_IN = {
    **{normal_form(c.value): c for c in FailureCategory},
    **{normal_form(name): c for name, c in SYNONYMS.items()},
}


class Classification(NamedTuple):
    failure_class: FailureCategory
    interrupting: bool  # when neither the user's map nor the source says otherwise
    user_interrupting: bool | None  # the user's map entry for the category or its class
    known: bool  # False: no map entry, synonym, Xid or words matched (class ``other``)
    words: str | None = None  # the words of the name the class was read from (class_by_words)


def classify(category: str, category_map: CategoryMap | None = None) -> Classification:
    """The class of one category text and whether it interrupts (see the module docstring)."""
    category_map = category_map or CategoryMap()
    key = normal_form(category)
    interrupting, words = None, None
    if key in category_map.classes:
        cls, known = category_map.classes[key], True
    elif key in _BUILT_IN:
        cls, known = _BUILT_IN[key], True
    elif match := _XID_IN_TEXT.search(category):
        info = None if match.group(1) else xid_catalog.XID_CATALOG.get(int(match.group(2)))
        if match.group(1):
            cls = xid_catalog.SXID_CATEGORY
        else:
            cls = info.category if info else FailureCategory.UNKNOWN_XID
            interrupting = xid_catalog.interrupting(info) if info else None
        known = True
    elif by_words := class_by_words(category):
        (cls, words), known = by_words, True
    else:
        cls, known = FailureCategory.OTHER, False
    user = category_map.interrupting.get(key, category_map.interrupting.get(normal_form(cls.value)))
    flag = cls.interrupting if interrupting is None else interrupting
    return Classification(cls, flag, user, known, words)


def class_by_words(category: str) -> tuple[FailureCategory, str] | None:
    """The class named by the words of a name no key matches whole, and those words: qualifiers
    ("error", "failure": :data:`~pipeline.categories.QUALIFIER_WORDS`) are dropped, then the
    longest runs of the remaining words that are a class or synonym decide if they all name one
    class ("InfiniBand link down": network; "GPU driver crash": GPU or software, so None). A vague
    word (:data:`~pipeline.categories.VAGUE_WORDS`: "Memory ECC" may be a DIMM's) takes part but
    never decides alone; a name of an unknown cause ("Node down") decides only alone."""
    words = [w for w in re.findall(r"[^\W_]+", category.casefold()) if w not in QUALIFIER_WORDS]
    for length in range(len(words), 0, -1):
        found: dict[FailureCategory, str] = {}
        for start in range(len(words) - length + 1):
            run = " ".join(words[start : start + length])
            cls = _BUILT_IN.get(run.replace(" ", ""))
            if cls not in (None, FailureCategory.OTHER):
                found.setdefault(cls, run)
        if len(found) > 1:  # a cause not known ("Unknown GPU error") yields to one named beside it
            found.pop(FailureCategory.UNDETERMINED, None)
        if len(found) == 1:
            ((cls, run),) = found.items()
            return None if run in VAGUE_WORDS else (cls, run)
        if found:  # the longest runs name two classes: no guess
            return None
    return None


def xid_in_text(text: str) -> tuple[str, int] | None:
    """``("Xid", 79)`` or ``("SXid", 12)`` for the first Xid/SXid code in ``text`` (the rule
    :func:`classify` applies), else None: readers that keep the code apart from the category."""
    match = _XID_IN_TEXT.search(text)
    return ("SXid" if match.group(1) else "Xid", int(match.group(2))) if match else None


def classes_frame(categories: list[str], category_map: CategoryMap) -> pl.DataFrame:
    """One row per category: its class, default and user flags, and whether it is known."""
    rows = [(c, *classify(c, category_map)) for c in categories]
    return pl.DataFrame(
        [(c, cls.value, flag, user, known, words) for c, cls, flag, user, known, words in rows],
        schema={
            "category": pl.String,
            "failure_class": pl.String,
            "interrupting": pl.Boolean,
            "user_interrupting": pl.Boolean,
            "known": pl.Boolean,
            "words": pl.String,
        },
        orient="row",
    )


_CLASSIFY_NEW = """
UPDATE events e
SET failure_class = c.failure_class,
    source_interrupting = e.interrupting,
    interrupting = coalesce(c.user_interrupting, e.interrupting, c.interrupting)
FROM category_classes c
WHERE e.failure_class IS NULL AND e.category = c.category
"""

_RECLASSIFY = """
UPDATE events e
SET failure_class = c.failure_class,
    interrupting = coalesce(c.user_interrupting, e.source_interrupting, c.interrupting)
FROM category_classes c
WHERE e.category = c.category
"""


def classify_new_events(con, category_map: CategoryMap) -> list[str]:
    """Classify the events not classified yet (a file's new events; call inside its transaction).
    Returns the notes on their categories (:func:`category_notes`)."""
    new = "SELECT category, count(*) FROM events WHERE failure_class IS NULL GROUP BY category"
    counts = con.sql(new).fetchall()
    if not counts:
        return []
    frame = classes_frame([c for c, _ in counts], category_map)
    with registered(con, "category_classes", frame):
        con.execute(_CLASSIFY_NEW)
    return category_notes(counts, frame)


def category_notes(counts: Iterable[tuple[str, int]], classes: pl.DataFrame) -> list[str]:
    """The notes on a file's categories, with their counts of new events: those classed by words
    of their name (a guess the user should see) and those not in the taxonomy. ``classes`` is a
    :func:`classes_frame`; categories it lacks or with no count are left out."""
    counts = dict(counts)
    rows = sorted(
        (row for row in classes.iter_rows(named=True) if counts.get(row["category"])),
        key=lambda row: (-counts[row["category"]], row["category"]),
    )
    notes = []
    if guessed := [row for row in rows if row["words"]]:
        names = ", ".join(
            f"{r['category']!r} {counts[r['category']]} as {r['failure_class']} (by {r['words']!r})"
            for r in guessed
        )
        notes.append(
            f"{_categories(len(guessed))} classed by words of the name: {names}; "
            "if one is wrong, map it with --category-map SOURCE=CLASS or [categories]"
        )
    if unknown := [row["category"] for row in rows if not row["known"]]:
        names = ", ".join(f"{c!r} {counts[c]}" for c in unknown)
        notes.append(
            f"{_categories(len(unknown))} not in the taxonomy, counted as class other (interrupting): "
            f"{names}; map them with --category-map SOURCE=CLASS or [categories]"
        )
    return notes


def _categories(n: int) -> str:
    return f"{n} categor{'y' if n == 1 else 'ies'}"


def apply_category_map(con, category_map: CategoryMap) -> bool:
    """Reclassify every stored event if the map differs from the one the warehouse was last built
    with (call inside a transaction, then rebuild incidents in full). Returns whether it did."""
    built = con.sql("SELECT category_map FROM incidents_built").fetchall()
    if not built or built[0][0] == category_map.fingerprint:
        return False
    categories = [c for (c,) in con.sql("SELECT DISTINCT category FROM events").fetchall()]
    with registered(con, "category_classes", classes_frame(categories, category_map)):
        con.execute(_RECLASSIFY)
    return True


def parse_category_map(pairs: Iterable[str]) -> CategoryMap:
    """``["Burn-in=hardware", "Maintenance=other:noninterrupting"]`` -> a map. The
    class may end in ``:interrupting`` or ``:noninterrupting``; SOURCE may name a class to set
    only that class's flag (``application=application:interrupting``)."""
    classes: dict[str, FailureCategory] = {}
    flags: dict[str, bool] = {}
    for pair in pairs:
        source, sep, target = pair.rpartition("=")
        name, _, flag = target.partition(":")
        if not sep or not source.strip() or not name.strip():
            raise ValueError(f"--category-map {pair!r}: expected SOURCE=CLASS, e.g. 'Faulty GPU=gpu_memory'")
        if flag not in ("", "interrupting", "noninterrupting"):
            raise ValueError(
                f"--category-map {pair!r}: after the class write :interrupting or :noninterrupting, "
                f"not {flag!r}"
            )
        try:
            classes[normal_form(source)] = class_named(name)
        except ValueError as exc:
            raise ValueError(f"--category-map {pair!r}: {exc}") from None
        if flag:
            flags[normal_form(source)] = flag == "interrupting"
    return CategoryMap(classes, flags)


def category_with_xid(reason: str, message: str) -> tuple[str, int | None]:
    """A reader's category and Xid code: the source's reason, with `` Xid N`` added when only the
    message names the code (``GpuError`` and "Xid 79 on GPU 3" give ``GpuError Xid 79``), so
    :func:`classify` finds the code in the category and the Xid catalog classes it. The message is
    read as :func:`xid_in_text` reads it: a caller holding the driver's own line, whose PCI id
    stands between the word and the code, passes its code in that form (``Xid 79``)."""
    in_reason, in_message = xid_in_text(reason), xid_in_text(message)
    if in_reason:
        return reason, in_reason[1]
    if in_message:
        return f"{reason} {in_message[0]} {in_message[1]}", in_message[1]
    return reason, None
