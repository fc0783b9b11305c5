"""tripwire console: the ``tripwire`` command and the Textual operations console."""

__tripwire__ = True
"""Marks this ``console`` as tripwire's: PyPI has an unrelated package of the same name."""
