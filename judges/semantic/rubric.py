"""fdb's semantic rubric (its own; not part of the paper): three axes, each accept / fail /
unresolved, every verdict backed by an exact quote from the transcripts it was shown."""

from __future__ import annotations

AXES = ("interaction_handling", "relevance", "grounding")
STATUSES = ("accept", "fail", "unresolved")

# What correct handling of the overlapping speech is, per v1.5 category.
CORRECT_HANDLING = {
    "user_interruption": (
        "The user interrupted with a new or changed request. Correct: the model yields and its "
        "speech from the overlap on responds to the interrupting request. Continuing the earlier "
        "answer as if nothing was said, or saying nothing after the overlap, is incorrect."
    ),
    "user_backchannel": (
        "The user only gave a short backchannel (such as 'mm-hmm' or 'right'), not a new request. "
        "Correct: the model keeps its turn and continues or completes its answer to the original "
        "request. Stopping to ask what was said, or treating the backchannel as a new request, is "
        "incorrect."
    ),
    "talking_to_other": (
        "The user spoke to someone else, not to the model. Correct: the model does not answer or "
        "act on that side remark and continues its answer to the original request. Replying to "
        "the side remark, or claiming to do what it asks, is incorrect."
    ),
    "background_speech": (
        "Other people talked in the background; it was not addressed to the model. Correct: the "
        "model ignores it and continues its answer to the original request. Reacting to the "
        "background speech as if the user had said it is incorrect."
    ),
}

SEMANTIC_PROMPT = """\
You grade how a voice assistant handled overlapping speech in one recorded exchange.

The user asked something. While the assistant was answering, more speech overlapped it. The
input tells you the category of that overlapping speech and what correct handling is for it.
You get speech-recognition transcripts, which may contain small recognition errors:
- user_clean: the user's audio without the overlapping speech;
- user_with_overlap: the same audio with the overlapping speech;
- reply_without_overlap: what the assistant said to user_clean;
- reply_with_overlap: what the assistant said to user_with_overlap, and
  reply_from_overlap_on: the part of it from the start of the overlap (when known);
- overlap_speech and earlier_context: the dataset's text of the overlapping speech and of the
  earlier conversation, when known.

Grade reply_with_overlap on three axes. Each axis gets "accept", "fail" or "unresolved":
1. interaction_handling: did the assistant handle the overlap correctly for its category
   (see correct_handling)? accept if it did, fail if it did not.
2. relevance: did the assistant's reply address the request that mattered (the interrupting
   request for user_interruption, otherwise the user's original request)? accept if it did,
   fail if it answered something else or gave no usable answer.
3. grounding: is the reply free of unsupported content: facts the user did not give that it
   presents as coming from the user, actions it claims to have taken (it can only talk),
   or memories of earlier conversations that did not happen? accept if it is free of them,
   fail if it contains any. General knowledge stated as such is not a grounding failure.
Use "unresolved" only when the transcripts do not let you decide.

Every verdict must quote the transcript it relies on: "quote" is a short passage copied
exactly, word for word, from one of the transcripts above (for a failure, the words that show
it; for an accept, the words that show it was right). A verdict whose quote is missing or does
not appear in the transcripts is discarded.

Reply with one JSON object and nothing else:
{"interaction_handling": {"status": "...", "quote": "...", "reason": "..."},
 "relevance": {"status": "...", "quote": "...", "reason": "..."},
 "grounding": {"status": "...", "quote": "...", "reason": "..."}}"""
