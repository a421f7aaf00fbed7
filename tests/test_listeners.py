"""The run's listeners called as one: who hears what, failures, forwarding's answers."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from dataclasses import fields

import pytest

from modeltap.core.listeners import Hearing, Listeners
from modeltap.core.notices import NOTICES, ExchangeView, Forward, Listener, Outcome, Reply
from tests.conftest import Heard, exchange_view

VIEW = exchange_view(path="/v1/chat/completions?key=sk-secret")


def test_listeners_hear_only_what_they_override() -> None:
    listeners = Listeners()

    class Finished(Listener):
        def __init__(self) -> None:
            self.heard: list[Outcome] = []

        def finished(self, outcome: Outcome) -> None:
            self.heard.append(outcome)

    listener = Finished()
    listeners.subscribe(listener)
    listeners.subscribe(listener)  # once, however often subscribed
    assert listeners.hear == Hearing(finished=True)
    listeners.finished(Outcome(VIEW, 1))
    assert len(listener.heard) == 1
    listeners.unsubscribe(listener)
    listeners.finished(Outcome(VIEW, 2))
    assert len(listener.heard) == 1 and listeners.hear == Hearing()
    assert listener not in listeners


def test_every_notice_is_a_method_of_the_composite_with_its_signature() -> None:
    # The core calls listeners.<notice>(...) only: a notice that Listeners did not
    # override would reach nobody, one without its flag could not be checked first.
    assert tuple(field.name for field in fields(Hearing)) == NOTICES
    for name in NOTICES:
        assert name in vars(Listeners), name
        mine = inspect.signature(getattr(Listeners, name)).parameters
        assert mine == inspect.signature(getattr(Listener, name)).parameters, name


class Raises(Listener):
    def chunk(self, view: ExchangeView, data: bytes, t_ns: int) -> None:
        raise RuntimeError(f"listener bug near {view.path}")

    def stopped(self) -> None:
        raise KeyError("sk-secret")


def test_a_listener_that_raises_is_logged_by_its_type_and_the_next_still_hears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listeners, heard = Listeners(), Heard()
    listeners.subscribe(Raises())
    listeners.subscribe(heard)
    with caplog.at_level(logging.ERROR, logger="modeltap"):
        listeners.chunk(VIEW, b"data: {}\n\n", 7)
        listeners.stopped()
    assert caplog.messages == [
        "modeltap: a chunk listener failed (RuntimeError)",
        "modeltap: a stopped listener failed (KeyError)",
    ]
    assert heard.notices == [("chunk", (VIEW, b"data: {}\n\n", 7)), ("stopped", ())]


class Answers(Listener):
    """Answers ``forwarding`` with ``answer`` (raises it, if an exception), noting its call."""

    def __init__(self, name: str, answer: Forward | Reply | Exception | None, called: list[str]):
        self.name, self.answer, self.called = name, answer, called

    def forwarding(
        self, view: ExchangeView, body: bytes, headers: Mapping[str, str]
    ) -> Forward | Reply | None:
        self.called.append(self.name)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def combined(
    *answers: tuple[str, Forward | Reply | Exception | None],
) -> tuple[Forward | Reply, list[str]]:
    listeners, called = Listeners(), list[str]()
    for name, answer in answers:
        listeners.subscribe(Answers(name, answer, called))
    return listeners.forwarding(VIEW, b"{}", {}), called


def test_forwarding_answers_as_one_the_first_reply_else_every_tag() -> None:
    assert Listeners().forwarding(VIEW, b"{}", {}) == Forward()
    tags, called = combined(
        ("a", Forward((("x-a", "1"),))),
        ("raises", ValueError("listener bug")),
        ("none", None),
        ("b", Forward((("x-b", "2"), ("x-c", "3")))),
    )
    assert tags == Forward((("x-a", "1"), ("x-b", "2"), ("x-c", "3")))
    assert called == ["a", "raises", "none", "b"]
    reply, called = combined(
        ("a", Forward((("x-a", "1"),))),
        ("first", Reply(409, b"first")),
        ("second", Reply(500, b"second")),
        ("b", Forward((("x-b", "2"),))),
    )
    assert reply == Reply(409, b"first")
    assert called == ["a", "first", "second", "b"]  # every listener still hears it
