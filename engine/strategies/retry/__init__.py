"""Retries: the policy (manifest section ``retry_policy``) and its backoff math (:mod:`.policy`).

The pipeline's backbone asks it after every failed attempt (:mod:`engine.decide`).
"""
