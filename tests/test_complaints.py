"""Complaints: an error line at once, then at most one a second per kind, each saying how many
came in between; a message callable is built only when a line goes out."""

import io

from rtinfer.realtime import complaints as mod
from rtinfer.realtime.complaints import Complaints


def test_first_line_at_once_then_one_a_second_with_the_count(monkeypatch):
    now = [10_000_000_000]
    monkeypatch.setattr(mod.time, "monotonic_ns", lambda: now[0])
    out = io.StringIO()
    c = Complaints("robot", stream=out)
    built = []

    def msg():
        built.append(1)
        return "chunk rejected"

    c.say("rejected_hash", msg)
    for _ in range(50):  # within the second: counted, not printed, not even built
        now[0] += 10_000_000
        c.say("rejected_hash", msg)
    c.say("obs_bad", "other kind")  # its own budget
    now[0] += 600_000_000  # 1.1 s after the first line
    c.say("rejected_hash", msg)
    lines = out.getvalue().splitlines()
    assert lines == [
        "robot: error: chunk rejected",
        "robot: error: other kind",
        "robot: error: chunk rejected (50 more since the last line)",
    ]
    assert len(built) == 2


def test_news_that_is_not_an_error_has_no_error_word():
    out = io.StringIO()
    Complaints("policy", stream=out).say("fits", "load fits again", error=False)
    assert out.getvalue() == "policy: load fits again\n"
