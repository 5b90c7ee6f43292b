"""Completing a written section with the best evidence it left out.

A small writer cites nearly every fact while a section has seen about twenty and far fewer past
that (measured on the 1.5B: 24 of 25, then 14 of 38), so what its searches ranked first decides
what the report says. After the section is written, the agent offers it the best-ranked facts of
the section's own tool results that it did not cite, and keeps the new sentences that cite one.
"Best-ranked": with a reranker, the section's own question judges all of them at once. Each result
was ranked against its own query, and a follow-up search on a name (the "Water Polo Club" a
planted fact brought up) puts its first facts as high as the section's main search does; with
round-robin over results those took the offer's places and the section's own evidence further down
its list (an apology, the new two-hour alerts) was never offered. Without a reranker the order is
each result's first fact, then each one's second, and so on.

Offered again, the 1.5B still leaves some out (the residents' question showed three gold
facts, the offer held two, the addition cited neither). With a reranker, what the judge ranks best
for the section and the text still does not cite is listed beneath the section, each fact in its
own words with its time (REPORT_LISTED_FACTS), so the report holds it even when the prose does not.
"""

from __future__ import annotations

from typing import Callable

from app.report.grounding import grounded, words
from app.report.protocol import citations_before_the_stop, sentences_of
from app.report.views import UUID_PATTERN, FactView

COMPLETION_FACTS = 10  # facts offered at once: the 1.5B still writes a sentence for each that helps
# Fewer when the section's question ordered them: its own evidence comes first, and the 1.5B writes a
# sentence for nearly every fact offered, helpful or not. On the three requirements tuned on (sample
# graph) every gold fact a judged offer held was in its first 5; a planted one came 9th
# and was written in.
JUDGED_COMPLETION_FACTS = 6


def within_a_page(facts: list[FactView], page: int) -> list[str]:
    """Ids of a result's facts (as shown, best first) that their own search ranked within `page`. A
    search that leaves out what the section has seen shows facts from further down (rank 20 and
    more), mostly off the subject; they stay citable but are not offered."""
    return [fact.uuid for fact in facts if fact.rank is None or fact.rank <= page]


def ranked_evidence(results: list[list[str]]) -> list[str]:
    """Fact ids of a section's tool results (each best first), interleaved by rank, each once."""
    order: dict[str, None] = {}
    for rank in range(max((len(result) for result in results), default=0)):
        for result in results:
            if rank < len(result):
                order.setdefault(result[rank], None)
    return list(order)


def uncited_evidence(results: list[list[str]], cited: set[str] | list[str]) -> list[str]:
    """The section's facts in `ranked_evidence` order, without those in `cited`."""
    return [uuid for uuid in ranked_evidence(results) if uuid not in cited]


def facts_to_offer(results: list[list[str]], cited: set[str],
                   best_first: Callable[[list[str]], list[str] | None] | None = None) -> list[str]:
    """The best facts of the section's results that the report does not cite yet: the first
    JUDGED_COMPLETION_FACTS in `best_first`'s order of them (the section's question judging them;
    None when it could not), else the first COMPLETION_FACTS in `ranked_evidence` order."""
    uncited = uncited_evidence(results, cited)
    judged = best_first(uncited) if best_first and uncited else None
    return judged[:JUDGED_COMPLETION_FACTS] if judged is not None else uncited[:COMPLETION_FACTS]


def facts_to_list(results: list[list[str]], cited: set[str], best_first: Callable[[list[str]], list[str] | None],
                  most: int) -> list[str]:
    """Up to `most` of the section's facts that the report still does not cite after completion, in
    `best_first`'s order (the section's question judging them); none when it could not judge. Without
    a judge nothing vouches for a fact the writer did not use, so nothing is listed."""
    uncited = uncited_evidence(results, cited)
    judged = best_first(uncited) if uncited and most else None
    return judged[:most] if judged is not None else []


def new_sentences(addition: str, section: str, offered: dict[str, str]) -> str:
    """The sentences of `addition` that cite an offered fact (uuid -> its text), say what it says, and
    are not already in `section` (a small model asked for new sentences may answer with old ones)."""
    have = {words(sentence) for sentence in sentences_of(section)}
    kept = []
    for sentence in sentences_of(citations_before_the_stop(addition)):
        cited = [offered[uuid.lower()] for uuid in UUID_PATTERN.findall(sentence) if uuid.lower() in offered]
        if cited and words(sentence) not in have and grounded(sentence, cited):
            kept.append(sentence)
    return " ".join(kept)
