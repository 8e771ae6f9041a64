"""A turn answered in chat's `refusal` field is marked in its record and in
the conversations API's JSON; records written before the mark existed read
as turns that were not refusals."""

from __future__ import annotations

from proxy.reasoning.blocks import TextPart, Turn, turn_from_record, turn_to_json, turn_to_record
from proxy.reasoning.builder import TurnBuilder


def test_the_builder_marks_a_refusal() -> None:
    builder = TurnBuilder()
    builder.refusal("I can't ")
    builder.refusal("help.")
    turn = builder.build(finish_reason="stop")
    assert (turn.content, turn.refusal) == ("I can't help.", True)
    assert turn_to_json(turn, 0)["refusal"] is True
    assert turn_from_record(turn_to_record(turn)) == turn


def test_an_answer_is_not_a_refusal() -> None:
    builder = TurnBuilder()
    builder.text("Sure.")
    turn = builder.build()
    assert turn.refusal is False
    assert turn_to_json(turn, 0)["refusal"] is False


def test_a_record_from_before_the_mark_reads_as_no_refusal() -> None:
    old = turn_to_record(Turn(parts=(TextPart("Sure."),), finish_reason="stop"))
    del old["refusal"]
    turn = turn_from_record(old)
    assert (turn.content, turn.refusal) == ("Sure.", False)
