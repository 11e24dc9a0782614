"""The history's cut rules (serving.conversation.dialog), without models or sockets."""

from __future__ import annotations

import pytest

from serving.conversation.dialog import CUT_NOTE, Boundary, Dialog, DialogError

TEXT = "Hello there. The sky is blue. It scatters light."
BOUNDARIES = [Boundary(12, 900.0), Boundary(29, 2100.0), Boundary(len(TEXT), 3300.0)]


def _reply(dialog: Dialog, item: str, user: str, played: float | None, finished: bool) -> None:
    record = dialog.open(f"resp_{item}", item, dialog.user_turn(user), audio=True)
    record.text, record.boundaries, record.sent_ms = TEXT, list(BOUNDARIES), 3300.0
    record.played_ms = played
    dialog.close(record, finished=finished)


def test_interrupted_reply_keeps_the_boundaries_played_and_marks_the_cut():
    dialog = Dialog(max_messages=12)
    _reply(dialog, "item_1", "Why is the sky blue?", played=2500.0, finished=False)
    assert dialog.history[-1] == {"role": "assistant", "content": "Hello there. The sky is blue.…"}
    system = dialog.messages("Be brief.", "And at night?")[0]["content"]
    assert system == f"Be brief. {CUT_NOTE}"


def test_a_reply_that_kept_nothing_joins_its_user_words_to_the_next_turn():
    dialog = Dialog(max_messages=12)
    _reply(dialog, "item_1", "Why is the sky blue?", played=400.0, finished=False)
    assert dialog.history == []
    assert (
        dialog.user_turn("I mean during the day.") == "Why is the sky blue? I mean during the day."
    )


def test_truncate_moves_the_cut_is_clamped_and_names_unknown_items():
    dialog = Dialog(max_messages=12)
    _reply(dialog, "item_1", "Why is the sky blue?", played=None, finished=True)
    assert dialog.history[-1]["content"] == TEXT  # finished and not cut: no mark
    assert "cut off" not in dialog.messages("Be brief.", "x")[0]["content"]
    record, kept, position = dialog.truncate("item_1", 1000, None)
    assert (kept, position) == (BOUNDARIES[0], 1000.0)
    assert dialog.history[-1]["content"] == "Hello there.…"
    record, kept, position = dialog.truncate("item_1", 9999, None)
    assert (kept, position) == (BOUNDARIES[-1], 3300.0)
    assert dialog.history[-1]["content"] == TEXT
    with pytest.raises(DialogError) as error:
        dialog.truncate("item_404", 10, "evt_1")
    assert error.value.code == "item_not_found" and error.value.event_id == "evt_1"


def test_a_truncate_during_the_reply_applies_when_it_ends():
    dialog = Dialog(max_messages=12)
    record = dialog.open("resp_1", "item_1", "Why?", audio=True)
    record.text, record.boundaries, record.sent_ms = TEXT[:29], BOUNDARIES[:2], 2100.0
    _record, kept, _position = dialog.truncate("item_1", 2000, None)
    assert kept == BOUNDARIES[0]
    record.text, record.boundaries, record.sent_ms = TEXT, list(BOUNDARIES), 3300.0
    assert dialog.close(record, finished=True) == BOUNDARIES[0]
    assert dialog.history[-1]["content"] == "Hello there.…"
