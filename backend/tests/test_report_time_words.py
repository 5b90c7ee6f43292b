"""A fact's time fields in words: event time only, read the way a model should repeat it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from app.report.time_words import describe_validity, parse_time
from app.report.views import FactView

NOW = datetime(2026, 11, 23, 9, 30, tzinfo=timezone.utc)  # the "import date" of the report


@pytest.mark.parametrize("valid_at, invalid_at, expired_at, words", [
    # The boil-water advisory of the sample graph: a span that is over.
    ("2025-03-14T00:00:00Z", "2025-04-02T00:00:00Z", "2026-11-23T09:30:00Z",
     "valid 14 March to 2 April 2025; no longer true"),
    # Same month, different years, a time of day.
    ("2025-03-10T00:00:00+00:00", "2025-03-12T00:00:00+00:00", None, "valid 10 to 12 March 2025; no longer true"),
    ("2012-03-01T00:00:00Z", "2024-12-31T00:00:00Z", None, "valid 1 March 2012 to 31 December 2024; no longer true"),
    ("2025-03-10T02:40:00Z", None, None, "valid from 10 March 2025, 02:40 UTC; still true"),
    # Neo4j's nanosecond strings and a date without a time.
    ("2025-03-09T00:00:00.000000000+00:00", None, None, "valid from 9 March 2025; still true"),
    ("2025-03-09", None, None, "valid from 9 March 2025; still true"),
    # An end in the future is not over yet.
    ("2025-05-01T00:00:00Z", "2030-12-31T00:00:00Z", None, "valid 1 May 2025 to 31 December 2030; true until then"),
    (None, "2024-11-30T00:00:00Z", "2026-11-23T09:30:00Z", "valid until 30 November 2024; no longer true"),
    # Ended, but the graph only knows when it learned so: no date is invented from system time.
    ("2019-05-01T00:00:00Z", None, "2026-11-23T09:30:00Z",
     "valid from 1 May 2019; no longer true (when it ended is not known)"),
    (None, None, "2026-11-23T09:30:00Z", "no date given; no longer true (when it ended is not known)"),
    (None, None, None, "no date given; still true"),
    ("soon", None, None, "valid from soon; still true"),  # unreadable: shown as stored, never dropped
])
def test_time_fields_in_words(valid_at, invalid_at, expired_at, words):
    assert describe_validity(valid_at, invalid_at, expired_at, now=NOW) == words


def test_the_import_date_never_reads_as_an_event():
    fact = FactView(uuid="0a0a0a0a-0000-4000-8000-000000000001",
                    fact="The boil-water advisory lasted 19 days, the longest in Port Alder's history.",
                    relation="LASTED_IN", source="Boil-water advisory", target="Port Alder",
                    source_uuid="a", target_uuid="b", valid_at="2025-03-14T00:00:00Z",
                    invalid_at="2025-04-02T00:00:00Z", expired_at="2026-11-23T09:30:00Z",
                    created_at="2026-11-23T09:30:00Z")
    line = fact.line()
    assert "valid 14 March to 2 April 2025; no longer true" in line
    for system_time in ("2026", "November", "expired", "created", "marked"):
        assert system_time not in line
    assert fact.is_historical and fact.to_dict()["time_label"] == fact.time_label()


def test_parse_time_reads_every_stored_shape_in_utc():
    expected = datetime(2025, 3, 14, 1, 0, tzinfo=timezone.utc)
    for text in ("2025-03-14T01:00:00Z", "2025-03-14T02:00:00+01:00", "2025-03-14T01:00:00.000000000Z"):
        assert parse_time(text) == expected
    assert parse_time(None) is None and parse_time("") is None and parse_time("14/03/2025") is None
