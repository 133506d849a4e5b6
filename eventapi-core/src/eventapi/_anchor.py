"""Placeholder until the anchor lands."""


class Anchor: ...
