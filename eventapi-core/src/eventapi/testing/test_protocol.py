"""The backend object: its name and the members of the protocol and its capabilities."""

from __future__ import annotations

from typing import Any

import pytest

from .._protocol import PROTOCOL_METHODS

CAPABILITY_MEMBERS = {
    "SupportsEventQuery": "event_query",
    "SupportsCaptureCheck": "stream_is_capturing",
    "SupportsHostFunc": "stream_launch_host_func",
}


def test_backend_is_a_non_empty_str(eventapi_api: Any) -> None:
    name = eventapi_api.BACKEND
    assert isinstance(name, str), f"BACKEND must be a str, got {type(name).__name__}"
    assert name.strip(), "BACKEND must name the backend as a log line shows it, not be blank"
    assert name == eventapi_api.BACKEND, "BACKEND must not change between reads"


@pytest.mark.parametrize("member", PROTOCOL_METHODS)
def test_protocol_member_is_callable(eventapi_api: Any, member: str) -> None:
    assert callable(getattr(eventapi_api, member, None)), (
        f"{type(eventapi_api).__name__} lacks {member}(), which EventApi requires"
    )


@pytest.mark.parametrize("capability", sorted(CAPABILITY_MEMBERS))
def test_declared_capability_is_callable(eventapi_api: Any, capability: str) -> None:
    # isinstance() on a runtime-checkable protocol only looks for the attribute; a capability
    # the core detects that way must also be callable, or the core calls a non-callable.
    from ._kit import CAPABILITIES

    if not isinstance(eventapi_api, CAPABILITIES[capability]):
        pytest.skip(f"the {eventapi_api.BACKEND} backend does not implement {capability}")
    member = CAPABILITY_MEMBERS[capability]
    assert callable(getattr(eventapi_api, member)), f"{member} is declared but not callable"
