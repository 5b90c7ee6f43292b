"""Whether a text says what a fact says: the checks behind completion and the "sources" list."""

from __future__ import annotations

from app.report.grounding import grounded, stated_sources, states
from app.report.views import FactView

# Facts and sentences from the 1.5B's stored reports on the sample graph.
SEAL = "Floodwater from Storm Edda entered Well 4 through its cracked wellhead seal."
AQUAPURE = "AquaPure Bottling supplies drinking water for the Port Alder Water Polo Club's home matches."
HARBOUR = "The Port Alder Water Authority supplies tap water to every household in the Harbour District."
ONLY_SUPPLIER = "The Port Alder Water Authority is the only drinking water supplier for the 18,000 residents of Port Alder."


def test_a_fact_said_in_other_words_is_stated():
    text = ("The crisis was also made worse by floodwater from Storm Edda entering Well 4 through its cracked wellhead "
            "seal. The advisory lasted 19 days.")
    assert states(text, SEAL)
    assert states("The Port Alder Water Authority, which supplies drinking water to the 18,000 residents of Port "
                  "Alder, issued a boil-water advisory on 14 March 2025.", ONLY_SUPPLIER)


def test_a_fact_that_only_shares_a_subject_is_not_stated():
    # the same water authority and water, another claim: 0.56 and 0.45 of the facts' content words
    sentence = ("The Port Alder Water Authority, which supplies drinking water to the 18,000 residents of Port Alder, "
                "issued a boil-water advisory on 14 March 2025.")
    assert not states(sentence, HARBOUR)
    assert not states("The Port Alder Water Polo Club is an amateur water polo club that plays at the municipal pool.",
                      AQUAPURE)
    # words spread over two sentences do not make one that states it
    assert not states("Storm Edda brought floodwater. Well 4 had a cracked wellhead seal.", SEAL)


def test_listed_sources_count_only_when_cited_or_stated():
    def view(number: int, fact: str) -> FactView:
        return FactView(uuid=f"0a0a0a0a-0000-4000-8000-00000000000{number}", fact=fact, relation="R", source="A",
                        target="B", source_uuid="a", target_uuid="b")

    seal, aqua, harbour = view(1, SEAL), view(2, AQUAPURE), view(3, HARBOUR)
    known = {fact.uuid: fact for fact in (seal, aqua, harbour)}
    invented = "0a0a0a0a-0000-4000-8000-000000000009"
    content = f"Water reached every household in the Harbour District [{harbour.uuid}]. Floodwater from Storm Edda got " \
              "into Well 4 through a cracked wellhead seal."
    kept, unstated = stated_sources(content, [seal.uuid, aqua.uuid, harbour.uuid, invented], known)
    # cited inline, or said; an unknown id stays for the citation check to report as removed
    assert kept == [seal.uuid, harbour.uuid, invented] and unstated == [aqua.uuid]
    # a text that cites nothing inline has only its list to go by
    assert stated_sources("Water came to every house.", [aqua.uuid, harbour.uuid], known) == (
        [aqua.uuid, harbour.uuid], [])


def test_an_added_sentence_must_be_made_of_its_facts_words():
    assert grounded("Floodwater from Storm Edda entered Well 4 through a cracked seal.", [SEAL])
    assert not grounded("The regulator blamed the council for years of neglect of Well 4.", [SEAL])
