"""The enqueue options are defined once: ``EnqueueOptions`` names ``JobRequest``'s fields."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import get_type_hints

from producer.request import EnqueueOptions, JobRequest

POSITIONAL = ("queue", "type", "payload")


def test_the_options_are_the_request_fields_after_the_first_three() -> None:
    request = [f.name for f in fields(JobRequest)]
    assert tuple(request[:3]) == POSITIONAL
    assert list(get_type_hints(EnqueueOptions)) == request[3:]


def test_an_option_is_required_exactly_when_the_request_field_has_no_default() -> None:
    required = {
        f.name
        for f in fields(JobRequest)
        if f.name not in POSITIONAL and f.default is MISSING and f.default_factory is MISSING
    }
    assert set(EnqueueOptions.__required_keys__) == required == {"tenant_id"}


def test_each_option_has_the_request_fields_type() -> None:
    hints = get_type_hints(JobRequest)
    assert get_type_hints(EnqueueOptions) == {k: hints[k] for k in get_type_hints(EnqueueOptions)}
