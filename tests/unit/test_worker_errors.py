"""How what a handler raises becomes a nack."""

from __future__ import annotations

from datetime import timedelta

import pytest

from workers.errors import (
    MESSAGE_LIMIT,
    TRACEBACK_LIMIT,
    Permanent,
    Retry,
    classify,
)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


class PartnerDown(Exception):
    pass


def test_an_ordinary_exception_is_retryable_with_class_message_and_traceback() -> None:
    failure = classify(_raised(PartnerDown("503 from mail API")))
    assert failure.error_class == "PartnerDown"
    assert failure.message == "503 from mail API"
    assert "PartnerDown: 503 from mail API" in failure.traceback
    assert (failure.permanent, failure.retry_after_s) == (False, 0.0)


def test_nested_classes_use_their_qualname() -> None:
    class Outer:
        class Inner(Exception):
            pass

    assert classify(_raised(Outer.Inner("x"))).error_class.endswith("Outer.Inner")


@pytest.mark.parametrize(
    ("after", "expected"), [(5, 5.0), (0.5, 0.5), (timedelta(minutes=2), 120.0), (None, 0.0)]
)
def test_retry_after_accepts_seconds_and_timedeltas(
    after: float | timedelta | None, expected: float
) -> None:
    failure = classify(_raised(Retry("later", after=after)))
    assert failure.retry_after_s == expected
    assert failure.permanent is False
    assert failure.error_class == "Retry"


def test_retry_rejects_a_negative_delay() -> None:
    with pytest.raises(ValueError, match="negative"):
        Retry(after=-1)


def test_permanent_is_not_retried() -> None:
    failure = classify(_raised(Permanent("invalid address")))
    assert (failure.permanent, failure.error_class, failure.message) == (
        True,
        "Permanent",
        "invalid address",
    )


def test_a_chained_cause_names_the_real_error() -> None:
    try:
        try:
            raise PartnerDown("429")
        except PartnerDown as exc:
            raise Retry(after=30) from exc
    except Retry as retry:
        failure = classify(retry)
    assert (failure.error_class, failure.message, failure.retry_after_s) == (
        "PartnerDown",
        "429",
        30.0,
    )


def test_subclasses_of_permanent_keep_their_name() -> None:
    class InvalidAddress(Permanent):
        pass

    failure = classify(_raised(InvalidAddress("no MX record")))
    assert failure.permanent
    assert failure.error_class.endswith("InvalidAddress")


def test_long_tracebacks_keep_their_tail_and_messages_their_head() -> None:
    def recurse(n: int) -> None:
        if n == 0:
            raise PartnerDown("x" * 5000)
        recurse(n - 1)

    try:
        recurse(50)
    except PartnerDown as exc:
        failure = classify(exc)
    assert len(failure.traceback) <= TRACEBACK_LIMIT
    assert failure.traceback.startswith("...")
    assert failure.traceback.rstrip().endswith("x" * 100)
    assert len(failure.message) <= MESSAGE_LIMIT
    assert failure.message.startswith("xxx") and failure.message.endswith("...")


def test_dependency_down_is_reported_as_such_with_its_cause_and_delay() -> None:
    from workers import DependencyDown
    from workers.errors import classify as classify_failure

    try:
        try:
            raise TimeoutError("smtp connect timed out")
        except TimeoutError as exc:
            raise DependencyDown("mail provider down", after=30) from exc
    except DependencyDown as down:
        failure = classify_failure(down)
    assert failure.error_class == "DependencyDown"
    assert failure.message == "TimeoutError: mail provider down"
    assert failure.retry_after_s == 30
    assert not failure.permanent
