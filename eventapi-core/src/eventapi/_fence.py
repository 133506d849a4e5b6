"""Placeholder until the fence lands."""


class EventFence: ...
