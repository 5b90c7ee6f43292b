"""A fact's time fields in words a model reads correctly.

A graph edge carries two kinds of time. `valid_at` / `invalid_at` say when the fact held in the
world (event time); `created_at` / `expired_at` say when the graph stored it and when the graph
learned it no longer holds (system time, often the import date). A small model shown
"marked expired 2026-11-23" repeats it as an event, so only event time is ever put in words here;
system time only tells *that* a fact ended when the graph has no end date for it.

    valid 14 March to 2 April 2025; no longer true
    valid from 9 March 2025; still true
    no date given; still true
"""

from __future__ import annotations

from datetime import datetime, timezone

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def parse_time(value: str | None) -> datetime | None:
    """An ISO date or datetime (FalkorDB's strings, Neo4j's nanoseconds, a trailing Z) in UTC, or None."""
    if not value:
        return None
    text = value.strip()
    if "." in text:  # Python reads at most microseconds: cut longer fractions, keep the offset
        head, _, tail = text.partition(".")
        digits = len(tail) - len(tail.lstrip("0123456789"))
        text = head + "." + tail[:min(digits, 6)] + tail[digits:] if digits else head + tail
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _clock(moment: datetime) -> str:
    """', 02:40 UTC' for a time of day; nothing at midnight (a date-only fact is stored at 00:00)."""
    return f", {moment:%H:%M} UTC" if (moment.hour, moment.minute) != (0, 0) else ""


def day_words(moment: datetime, year: bool = True, month: bool = True) -> str:
    words = str(moment.day)
    if month:
        words += f" {MONTHS[moment.month - 1]}"
    if year:
        words += f" {moment.year}"
    return words + _clock(moment)


def _raw(value: str | None) -> str:
    return value[:10] if value else "?"


def span_words(start: datetime, end: datetime) -> str:
    """'14 March to 2 April 2025', '9 to 10 March 2025', '1 March 2012 to 31 December 2024'."""
    same_year = start.year == end.year and not _clock(start)
    same_month = same_year and start.month == end.month
    return f"{day_words(start, year=not same_year, month=not same_month)} to {day_words(end)}"


def describe_validity(valid_at: str | None, invalid_at: str | None, expired_at: str | None,
                      now: datetime | None = None) -> str:
    """When the fact held and whether it still does, from event time only."""
    now = now or datetime.now(timezone.utc)
    start, end = parse_time(valid_at), parse_time(invalid_at)
    if valid_at and start is None or invalid_at and end is None:  # unreadable: say the dates as stored
        return _unparsed(valid_at, invalid_at, expired_at)
    if end is not None:
        status = "no longer true" if end <= now else "true until then"
        if start is not None:
            return f"valid {span_words(start, end)}; {status}"
        return f"valid until {day_words(end)}; {status}"
    ended = "no longer true (when it ended is not known)" if expired_at else "still true"
    if start is not None:
        return f"valid from {day_words(start)}; {ended}"
    return f"no date given; {ended}"


def _unparsed(valid_at: str | None, invalid_at: str | None, expired_at: str | None) -> str:
    if invalid_at:
        span = f"{_raw(valid_at)} to {_raw(invalid_at)}" if valid_at else f"until {_raw(invalid_at)}"
        return f"valid {span}; no longer true"
    ended = "no longer true (when it ended is not known)" if expired_at else "still true"
    return f"valid from {_raw(valid_at)}; {ended}"
