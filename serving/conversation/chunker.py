"""Cutting a reply's token stream into speakable chunks, so that TTS can start early.

The LLM's text arrives piece by piece; :class:`SpeechChunker` hands out a chunk as soon as it is
complete, and the first one is kept short, since the first audio waits for its synthesis:

- a sentence end (``. ! ? ; …`` followed by whitespace) always ends a chunk;
- the first chunk also ends at a clause boundary (``,`` ``:`` or a dash, followed by whitespace)
  once it has ``first_clause_words`` words, and in any case after ``first_max_words`` words
  (3 and 7, rather than 4 and 12, for an earlier first audio; measured:
  docs/benchmarks.md#reply-chunking; a system may set its own: ``first_chunk`` in its launch
  file);
- a later chunk ends at a clause boundary once it has ``clause_words`` words, and in any case
  after ``max_words`` (so that a long sentence does not hold up synthesis while audio plays);
- a cut made only because of the word count does not leave an English article, preposition,
  conjunction or copula at the chunk's end ("could be a" + "smoothie..."): it moves on by up to
  two words ("could be a smoothie").

Chunks are the reply's text cleaned by :func:`speakable` (markdown characters, emoji and URLs
dropped, so a markdown link keeps its text alone; whitespace collapsed) and cut only at
whitespace, so the chunks joined with spaces are ``speakable(reply)``: no markdown or emoji
reaches the TTS. A cut is made only once the whitespace after it has arrived: "1,000" or "3.5"
are never cut, nor is a URL (it holds no whitespace), so it is removed from its chunk whole.
"""

from __future__ import annotations

import re

_MARKUP = re.compile(r"[*_#`~<>\[\]{}|]+")
# Pictographs, symbols, dingbats, flags, keycaps, variation selectors and joiners.
_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe00-\ufe0f\u200d\u20e3]+")
_URL = re.compile(r"\(?\b(?:https?://|www\.)[^\s)]*\)?")
_SENTENCE_END = re.compile(r"(?<=[.!?;…])\s+")
_CLAUSE_END = re.compile(r"(?:(?<=[,:—–])|(?<=\s-)|(?<=\s--))\s+")
_GAP = re.compile(r"\s+")
# Words a chunk cut by its length alone should not end on (it would be spoken as a phrase end).
_DANGLING = frozenset(
    "a an the of to in on at by for with from into about as and or but nor so if than that which "
    "who is are was were be been am has have had do does did will would can could should may "
    "might must my your his her its our their this these those".split()
)
DANGLING_SLACK = 2  # words a length cut may move on to avoid a dangling word
# The first chunk's rule by default, (first_clause_words, first_max_words); a system may set its
# own (serving.systems.SystemConfig.first_chunk): every node that cuts or announces a reply's
# first chunk takes the system's, so the reply model announces the chunk the speech node cuts.
FIRST_CHUNK = (3, 7)


def _strip(piece: str) -> str:
    """Markup characters and emoji become spaces (safe on any piece of the stream)."""
    return _EMOJI.sub(" ", _MARKUP.sub(" ", piece))


def _collapse(text: str) -> str:
    """URLs removed (whole words only), whitespace collapsed."""
    return " ".join(_URL.sub(" ", text).split())


def speakable(text: str) -> str:
    """LLM text with markup, emoji and URLs removed and whitespace collapsed."""
    return _collapse(_strip(text))


def _words(text: str) -> int:
    return len(text.split())


class SpeechChunker:
    """Feed it the LLM's pieces with :meth:`push`, then :meth:`finish`; each returns the chunks
    completed by then, in order."""

    def __init__(
        self,
        first_clause_words: int = FIRST_CHUNK[0],
        first_max_words: int = FIRST_CHUNK[1],
        clause_words: int = 12,
        max_words: int = 30,
    ) -> None:
        self._first_rule = (first_clause_words, first_max_words)
        self._later_rule = (clause_words, max_words)
        self._text = ""  # cleaned of markup; whitespace not yet collapsed
        self.chunks = 0  # chunks handed out so far

    def push(self, piece: str) -> list[str]:
        self._text += _strip(piece)
        out = []
        while (cut := self._cut()) is not None:
            chunk = _collapse(self._text[: cut[0]])
            self._text = self._text[cut[1] :]
            if chunk:
                out.append(chunk)
                self.chunks += 1
        return out

    def finish(self) -> list[str]:
        """The rest of the reply (a reply cut by max_tokens keeps its last piece)."""
        rest = _collapse(self._text)
        self._text = ""
        if not rest:
            return []
        self.chunks += 1
        return [rest]

    def _cut(self) -> tuple[int, int] | None:
        """(end of the chunk, start of the rest) at the earliest allowed cut, if any."""
        text = self._text
        clause_words, max_words = self._later_rule if self.chunks else self._first_rule
        cuts = []
        if (end := _SENTENCE_END.search(text)) is not None:
            cuts.append(end.span())
        for clause in _CLAUSE_END.finditer(text):
            if _words(text[: clause.start()]) >= clause_words:
                cuts.append(clause.span())
                break
        for gap in _GAP.finditer(text):
            head = text[: gap.start()].split()
            if gap.start() > 0 and len(head) >= max_words:
                if head[-1].lower() in _DANGLING and len(head) < max_words + DANGLING_SLACK:
                    continue
                cuts.append(gap.span())
                break
        return min(cuts) if cuts else None
