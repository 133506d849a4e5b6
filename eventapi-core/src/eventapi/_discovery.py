"""Placeholder until discovery lands."""


def backend(name=None):
    raise NotImplementedError


def backends():
    raise NotImplementedError
