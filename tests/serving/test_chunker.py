"""SpeechChunker: where a streamed reply is cut for synthesis (no models)."""

from __future__ import annotations

import random
import re

import pytest

from serving.conversation.chunker import SpeechChunker, speakable

SKY = (
    "The answer to this question is that the sky appears blue because of a process called "
    "Rayleigh scattering, which is a natural phenomenon where light encounters molecules of air "
    "and is scattered in all directions, but primarily in the direction of shortest distance. This"
)


def tokens(text: str) -> list[str]:
    """Pieces as a llama tokenizer streams them: a word with its leading space,
    punctuation apart."""
    return re.findall(r"\s*\w+|\s*[^\w\s]", text)


def chunk(pieces: list[str], **rules: int) -> list[str]:
    chunker = SpeechChunker(**rules)
    out = [c for piece in pieces for c in chunker.push(piece)]
    return out + chunker.finish()


def test_sentences_are_cut_as_soon_as_they_end():
    chunker = SpeechChunker()
    assert chunker.push("Sure") == [] and chunker.push(".") == []
    assert chunker.push(" The") == ["Sure."]  # the space after the period confirms the end
    assert chunker.push(" capital is Paris!") == []
    assert chunker.push(" Next; one") == ["The capital is Paris!", "Next;"]
    assert chunker.finish() == ["one"] and chunker.finish() == []


def test_first_chunk_ends_at_a_clause_after_three_words_or_seven_words():
    assert chunk(tokens("Yes, the capital of France is Paris, which is a lovely city.")) == [
        "Yes, the capital of France is Paris,",
        "which is a lovely city.",
    ]
    assert chunk(tokens("Well: there are three things - first, the sun and the rain.")) == [
        "Well: there are three things -",
        "first, the sun and the rain.",
    ]
    assert chunk(tokens("The rainbow is a beautiful optical illusion created by light.")) == [
        "The rainbow is a beautiful optical illusion",
        "created by light.",
    ]
    # "is that" would end the 7-word chunk on a function word: the cut moves on (2 words at most)
    assert chunk(tokens(SKY)) == [
        "The answer to this question is that the sky",
        "appears blue because of a process called Rayleigh scattering, which is a natural "
        "phenomenon where light encounters molecules of air and is scattered in all directions,",
        "but primarily in the direction of shortest distance.",
        "This",
    ]


def test_a_length_cut_does_not_end_on_an_article_or_preposition():
    assert chunk(tokens("A healthy breakfast idea could be a smoothie made with fruit.")) == [
        "A healthy breakfast idea could be a smoothie",
        "made with fruit.",
    ]
    # at most DANGLING_SLACK words further: a run of function words is still cut
    assert chunk(tokens("One two three four five six of the a an and so on")) == [
        "One two three four five six of the a",
        "an and so on",
    ]
    assert chunk(
        tokens("w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15"), first_max_words=4
    ) == ["w1 w2 w3 w4", "w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15"]


def test_later_chunks_cut_at_clauses_only_when_long_and_capped():
    words = " ".join(f"w{k}" for k in range(70))
    pieces = tokens("Okay. " + words)
    assert [len(c.split()) for c in chunk(pieces)] == [1, 30, 30, 10]
    assert chunk(tokens("Okay. One, two, three.")) == ["Okay.", "One, two, three."]


def test_numbers_markup_and_whitespace():
    assert chunk(tokens("It costs 1,000 dollars or 3.5 euros in total, they say.")) == [
        "It costs 1,000 dollars or 3.5 euros",
        "in total, they say.",
    ]
    pieces = ["**Paris**", " is", "\n\n", " `big`", ".", " *Yes*", "."]
    assert (
        chunk(pieces) == ["Paris is big .", "Yes ."] == [speakable("**Paris** is `big`."), "Yes ."]
    )
    assert chunk(["   ", "\n"]) == []


def test_no_markdown_emoji_or_url_reaches_the_tts():
    """A markdown link keeps its text alone; emoji (with joiners and variation selectors) go."""
    text = (
        "## Paris 🇫🇷 is **the capital** 😀! See [Paris](https://en.wikipedia.org/wiki/Paris). "
        "Family: 👨‍👩‍👧 ❤️ ok ✅."
    )
    assert speakable(text) == "Paris is the capital ! See Paris . Family: ok ."
    pieces = tokens(text)
    assert " ".join(chunk(pieces)) == speakable(text)
    for piece in chunk(pieces):
        assert not set(piece) & set("*_#`~<>[]{}|()") and "http" not in piece
        assert all(ord(ch) < 0x2000 for ch in piece), piece


@pytest.mark.parametrize("seed", range(20))
def test_chunks_joined_are_the_speakable_reply_however_it_is_split(seed):
    rng = random.Random(seed)
    text = rng.choice(
        [
            SKY,
            "A *rainbow*, they say: light - and water. Or not?! Fine… ok; 3.5, 1,000.",
            "Hi 👋🏽 there! A [link](http://x.org/a_b) and 🎉🎉 more… `code` 😀.",
        ]
    )
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 30)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    chunks = chunk(pieces)
    assert " ".join(chunks) == speakable(text)
    assert all(c == c.strip() and c for c in chunks)
    assert len(chunks[0].split()) <= 12
