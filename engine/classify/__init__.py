"""The one classifier: any exception in, a kind, a class and the rule that decided out.

:func:`classify` and the order of its rules are in :mod:`engine.classify.classifier`, the
tables those rules read in :mod:`engine.classify.patterns`, and the answer's types in
:mod:`engine.classify.classification`.

Internal: import its public names from :mod:`engine`.
"""

from engine.classify.classification import Classification, ClassificationOverride, Rule
from engine.classify.classifier import classify
from engine.classify.patterns import PERMANENT_STATUSES, TRANSIENT_STATUSES

__all__ = [
    "PERMANENT_STATUSES",
    "TRANSIENT_STATUSES",
    "Classification",
    "ClassificationOverride",
    "Rule",
    "classify",
]
