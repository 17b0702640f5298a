"""What a person's answer to the approval task gives the registered version, and that no answer
registers nothing (issue 64, 6: under dag.test(mark_success_pattern="approve") a version was
registered tagged approved_by: unknown)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from trialflow.tracking.registry import Approval, NotRegistered, approval_of

AT = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


def test_the_answer_says_who_and_when():
    answer = {"chosen_options": ["Approve"], "responded_by_user": {"id": "7", "name": "alice"}, "responded_at": AT}
    assert approval_of(answer, "approve", "d/r") == Approval("alice", "2026-11-28T10:00:00+00:00", "d/r")
    by_id = {"responded_by_user": {"id": "7"}, "responded_at": "2026-11-28T10:00:00Z"}
    assert approval_of(by_id, "approve", "d/r").by == "7"


@pytest.mark.parametrize(
    "response",
    [
        None,  # marked success: the task returned nothing
        {},
        "Approve",
        {"chosen_options": ["Approve"]},  # no person, no time
        {"responded_by_user": {"name": "alice"}},
        {"responded_by_user": {}, "responded_at": AT},
        {"responded_by_user": None, "responded_at": AT},
    ],
)
def test_an_approval_nobody_answered_registers_nothing(response):
    with pytest.raises(NotRegistered, match="'approve' holds no person's answer .* nothing is registered"):
        approval_of(response, "approve", "d/r")
