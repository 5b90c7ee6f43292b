"""After the writer: a written section held to its own question, then completed with what it left out.

With a reranker the section's question judges every fact the section cites or was shown. A cited fact
it scores under REPORT_CITATION_FLOOR loses its citation (citation_floor.py). The section is then
offered, in one short request, the best facts of its own results that the report does not cite yet
(with a reranker as its question judges them, none under REPORT_ADDED_FACTS_FLOOR), and keeps the added
sentences that say what one of them says; with a reranker, the facts the question still judges best
that nothing cites are listed beneath it (completion.py says why each step exists).
"""

from __future__ import annotations

import time
from typing import Callable

from app.config import Config
from app.report import prompts
from app.report.citation_floor import lower_of, without_citations, without_names
from app.report.completion import facts_to_list, facts_to_offer, new_sentences, uncited_evidence
from app.report.fact_book import FactBook
from app.report.llm import ReportLLM, ReportLLMError
from app.report.planning import SectionPlan
from app.report.protocol import verify_citations
from app.report.sections import SectionDraft, note_if_uncited
from app.report.store import ms_since
from app.report.tools import FactJudgement, ReportTools
from app.report.views import FactView
from app.report.written import check_written, final_answer


class SectionReview:
    def __init__(self, config: Config, tools: ReportTools, llm: ReportLLM, book: FactBook,
                 log: Callable[..., None], max_tokens: int) -> None:
        self.tools, self.llm, self.book, self.log, self.max_tokens = tools, llm, book, log, max_tokens
        self.citation_floor = config.report_citation_floor
        self.added_facts_floor = max(config.report_added_facts_floor, config.report_citation_floor)
        self.floor_without_names = config.report_floor_without_names
        self.listed_facts = config.report_listed_facts

    def review(self, draft: SectionDraft, plan: SectionPlan, cited_by_report: set[str]) -> None:
        """Hold `draft`'s citations to its question, then offer it the best-ranked facts of its results
        that neither it nor `cited_by_report` cites; with a reranker, list the best of the rest."""
        if draft.written_by != "model" or not draft.cited:
            return
        question = plan.part or draft.goal
        judgement = self._judge(draft, question, [self.book.known[uuid] for uuid in draft.cited + uncited_evidence(
            draft.evidence, draft.cited)])
        if judgement is not None:
            self._hold_to_question(draft, judgement)
        if not draft.cited:
            return

        def judged(uuids: list[str]) -> list[str] | None:
            wanted = set(uuids)
            return None if judgement is None else [
                fact.uuid for fact in judgement.best_first
                if fact.uuid in wanted and not judgement.below(fact.uuid, self.added_facts_floor)]

        offered = facts_to_offer(draft.evidence, cited_by_report | set(draft.cited), best_first=judged)
        if offered:
            self._offer(draft, plan, offered, judged=judgement is not None)
        if judgement is not None:
            self._list_unwritten(draft, cited_by_report, judged)

    def _judge(self, draft: SectionDraft, question: str, facts: list[FactView]) -> FactJudgement | None:
        """The question's judgement of `facts`; with REPORT_FLOOR_WITHOUT_NAMES each score is the lower
        of the question's as asked and without its names (citation_floor.py)."""
        judgement = self.tools.judge_facts(question, facts)
        plain = without_names(question) if self.floor_without_names and self.added_facts_floor else None
        if judgement is None or plain is None:
            return judgement
        draft.judged_without_names = plain
        return lower_of(judgement, self.tools.judge_facts(plain, facts))

    def _hold_to_question(self, draft: SectionDraft, judgement: FactJudgement) -> None:
        """Take out the citations of facts the section's question scores under the floor, and the
        sentences that cited only those; a section left citing nothing is replaced by a note."""
        dropped = [uuid for uuid in draft.cited if judgement.below(uuid, self.citation_floor)]
        if not dropped:
            return
        draft.content, removed = without_citations(draft.content, set(dropped))
        draft.cited = [uuid for uuid in draft.cited if uuid not in dropped]
        draft.off_question, draft.removed_claims = dropped, draft.removed_claims + removed
        note_if_uncited(draft)
        self.log("off_question", dropped=self.book.labels_of(dropped), removed_claims=removed,
                 scores=[round(judgement.scores[uuid], 4) for uuid in dropped])

    def _offer(self, draft: SectionDraft, plan: SectionPlan, offered: list[str], judged: bool) -> None:
        """Ask the model for sentences on the `offered` facts; keep those that cite one and say what it says."""
        started = time.perf_counter()
        known = self.book.known
        goal = draft.goal + (f" (it answers: {plan.part})" if plan.part and plan.part != draft.goal else "")
        messages = prompts.completion_messages(goal, [self.book.with_labels(known[uuid].line()) for uuid in offered])
        answer = ""
        try:
            answer = self.llm.chat(messages, max_tokens=self.max_tokens, json_object=True)
            written, problem = final_answer(answer)
        except ReportLLMError as error:
            written, problem = None, f"{error.error_class}: {error.detail}"
        added = ""
        if written is not None:
            # None for sources: only what the new text itself cites counts
            checked = check_written(written[0], None, self.book.by_label, known)
            added = new_sentences(checked.content, draft.content, {uuid: known[uuid].fact for uuid in offered})
        cited = [uuid for uuid in verify_citations(added, known)[1] if uuid not in draft.cited]
        if added:
            draft.content += "\n\n" + added
            draft.cited += cited
            draft.completed = cited
        self.log("complete", duration_ms=ms_since(started), judged=judged, without_names=draft.judged_without_names,
                 offered=self.book.labels_of(offered), cited=self.book.labels_of(cited), chars=len(added),
                 error=problem or None, answer=answer[:500])

    def _list_unwritten(self, draft: SectionDraft, cited_by_report: set[str],
                        judged: Callable[[list[str]], list[str] | None]) -> None:
        """List beneath the section the facts its question judged best that the report still does not cite."""
        draft.listed = facts_to_list(draft.evidence, cited_by_report | set(draft.cited), judged, self.listed_facts)
        draft.cited += draft.listed
        if draft.listed:
            self.log("list", listed=self.book.labels_of(draft.listed))
