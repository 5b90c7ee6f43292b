"""The text checks every written section passes that need no model: a write cut short by max_tokens
loses the sentence it was cut in, and a sentence the text already said is said once."""

from __future__ import annotations

from app.report.protocol import LOOP_MAX_WORDS, cut_loops, salvage_write, sentences_of, without_unfinished_ending
from app.report.written import MIN_REPEATED_WORDS, without_repeated_sentences, without_uncited_claims


def cut(content: str) -> str:
    """A write answer max_tokens stopped inside its content string."""
    return '{"action": "write", "content": "' + content


def test_a_write_cut_short_ends_at_its_last_finished_sentence():
    # Two real endings: "... was a " (late-warning) and "... who was the Port Ald" (businesses).
    assert salvage_write(cut("The flood came first [F1]. The failure to warn was a ")) == (
        "The flood came first [F1].", [])
    assert salvage_write(cut("Wells closed [F1].\\nReports came from Sofia Marques, who was the Port Ald")) == (
        "Wells closed [F1].", [])
    assert salvage_write(cut("It rained [F1]. Then [F2")) == ("It rained [F1].", [])  # cut inside a label


def test_what_is_finished_stays():
    assert salvage_write(cut("It rained [F1]. Then the wells closed [F2]")) == (
        "It rained [F1]. Then the wells closed [F2]", [])  # a citation ends it
    assert salvage_write(cut('It rained [F1]. He said \\"it is safe.\\"')) == (
        'It rained [F1]. He said "it is safe."', [])
    assert salvage_write(cut("Tests found E. coli in We")) == ("Tests found E. coli in We", [])  # all there is
    assert without_unfinished_ending("It rained [F1]. Tests found E. coli in We") == "It rained [F1]."


def test_a_closed_write_is_never_cut():
    closed = '{"action": "write", "content": "It rained [F1]. Then", "sources": ["F1"]}'
    assert salvage_write(closed) == ("It rained [F1]. Then", ["F1"])


# The shape of a real loop (a stored report on the businesses requirement): five sentences, 181 words, four and a half times over.
LOOP = " ".join(
    f"The water authority also received reports from {who}, who was {what}, about what happened in the "
    f"weeks of the advisory in the town and the harbour [{label}]."
    for who, what, label in [("Jonas Feld", "the Courier's reporter", "a"), ("Tidewater Seafoods", "a sponsor", "b"),
                             ("Sofia Marques", "the director", "c"), ("Rafael Ortiz", "a goalkeeper", "d"),
                             ("Amara Nwosu", "a doctor", "e"), ("Nadia Karim", "an operator", "f")]) + " "


def test_a_loop_of_whole_sentences_keeps_each_once():
    text = "Tidewater halted processing [x]. " + LOOP * 4 + "The bakery was fine [y]."
    assert len(LOOP.split()) > LOOP_MAX_WORDS and cut_loops(text) == (text, 0)  # too long a stretch for it
    kept, removed = without_repeated_sentences(text)
    assert kept == "Tidewater halted processing [x]. " + LOOP.strip() + " The bakery was fine [y]."
    assert len(removed) == 3 * 6 and set(removed) == set(sentences_of(LOOP))


def test_repeats_across_lines_go_and_short_ones_stay():
    text = "Wells 4 and 6 closed [a].\n\nYes. Wells 4 and 6 closed [a].\nYes. Wells 4 and 6 closed [b]."
    kept, removed = without_repeated_sentences(text)
    assert kept == "Wells 4 and 6 closed [a].\n\nYes.\nYes. Wells 4 and 6 closed [b]."  # another citation: another claim
    assert removed == ["Wells 4 and 6 closed [a]."] and len("Yes.".split()) < MIN_REPEATED_WORDS


A = "0a0a0a0a-0000-4000-8000-000000000001"
B = "0a0a0a0a-0000-4000-8000-000000000002"


def test_in_a_text_that_cites_inline_a_sentence_citing_nothing_goes():
    # Sentences of real stored report sections, each citing nothing in a section that cites.
    text = (f"The advisory lasted 19 days [{A}]. The company's chief executive was also arrested.\n"
            "(valid from 2 May 2025; still true)\n"
            "### Who paid\n"
            f"The council paid for the plant [{B}]. The graph does not say who paid for the pipes. The group was")
    kept, removed = without_uncited_claims(text, [])
    assert kept == (f"The advisory lasted 19 days [{A}].\n\n### Who paid\n"
                    f"The council paid for the plant [{B}]. The graph does not say who paid for the pipes.")
    assert removed == ["The company's chief executive was also arrested.", "(valid from 2 May 2025; still true)",
                       "The group was"]


def test_a_sentence_stating_a_fact_cited_under_sources_stays():
    fact = "Mayor Lena Hartmann signed the emergency order for the water repairs."
    text = f"The advisory lasted 19 days [{A}]. The emergency order for the repairs was signed by Mayor Lena Hartmann."
    assert without_uncited_claims(text, [fact]) == (text, [])
    assert without_uncited_claims(text, [])[1] == [
        "The emergency order for the repairs was signed by Mayor Lena Hartmann."]


def test_a_text_citing_only_under_sources_is_left_alone():
    text = "The advisory lasted 19 days. The chief executive was arrested."
    assert without_uncited_claims(text, []) == (text, [])
