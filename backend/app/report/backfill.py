"""Backfill a section's own question judges among its worst facts is left off the page.

A follow-up search leaves out the facts the section was shown already (`already_shown`), so when
its best facts are all known its page fills from the bottom of its ranking: facts it ranked beyond
its first page. Those are where the sample bench's cited distractors came from on such pages in
sessions 8-10 (Jonas Feld's journalism prize three times, the water polo floodlights once: 4 of the
5 distractors cited on held-out requirements, each judged in the last tenth of its section), but
backfill was also where 15 of the 82 cited gold facts came from, some judged in the last fifth. So
a backfilled fact is dropped only when the section's question, judged over everything the section
has seen, puts it in that last tenth; with the reranker off nothing is judged and the page is shown
as it came.
"""

from __future__ import annotations

import math

from app.report.views import FactView

OFF_QUESTION_SHARE = 0.1  # the last tenth of the section's facts, as its question's judge orders them


def backfilled(facts: list[FactView], page: int) -> list[FactView]:
    """Facts the search itself ranked beyond its first `page`: shown only because better ones were held back."""
    return [fact for fact in facts if fact.rank is not None and fact.rank > page]


def off_question(backfill: list[FactView], judged_best_first: list[FactView],
                 share: float = OFF_QUESTION_SHARE) -> list[str]:
    """uuids of the `backfill` facts that fall in the last `share` of the section's judged facts."""
    worst = {fact.uuid for fact in judged_best_first[math.ceil(len(judged_best_first) * (1 - share)):]}
    return [fact.uuid for fact in backfill if fact.uuid in worst]
