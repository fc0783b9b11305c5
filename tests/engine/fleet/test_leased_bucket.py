"""A ``scope: fleet`` rate as one process spends it (:class:`LeasedBucket`): pure arithmetic, no
Redis, no clock — times are given."""

from __future__ import annotations

import pytest

from engine.fleet.leased_bucket import LeasedBucket


def test_a_lease_mode_bucket_only_holds_what_was_leased_while_leases_come() -> None:
    bucket = LeasedBucket(rate_per_s=100, burst=10, period_s=0.1, now=5.0)
    assert (bucket.capacity, bucket.max_lease) == (10, 20)
    assert bucket.level(5.0) == 0 and not bucket.take(5.0), "nothing before the first lease"
    bucket.lease_granted(3, members=2, now=5.1)
    assert bucket.share == 50 and bucket.next_lease_at == pytest.approx(5.2)
    assert [bucket.take(5.1) for _ in range(4)] == [True, True, True, False]
    assert bucket.level(5.39) == 0, "no refill of its own while the next lease is not overdue"


def test_an_overdue_lease_refills_at_the_fleet_share_so_a_slow_redis_never_stalls_calls() -> None:
    bucket = LeasedBucket(rate_per_s=100, burst=10, period_s=0.1, now=0.0)
    bucket.lease_granted(1, members=2, now=0.1)
    assert bucket.take(0.1) and bucket.overdue_at == pytest.approx(0.4)
    assert bucket.level(0.4) == 0
    assert bucket.level(0.42) == pytest.approx(1.0), "50/s from the moment it is overdue"
    assert bucket.level(9.0) == 5, "at most its share of the burst"
    assert bucket.take(0.42) and not bucket.take(0.42)
    bucket.lease_granted(2, members=2, now=0.45)
    assert bucket.level(0.45) == pytest.approx(2 + 0.03 * 50), "a lease adds to what refilled"


def test_a_waiters_turn_is_the_next_lease_then_the_fleet_share() -> None:
    bucket = LeasedBucket(rate_per_s=100, burst=10, period_s=0.1, now=4.9)
    bucket.lease_granted(1, members=2, now=5.0)
    assert bucket.ready_at(5.0, 1) == 5.0
    assert bucket.ready_at(5.0, 2) == pytest.approx(5.1), "the next lease"
    assert bucket.ready_at(5.0, 4) == pytest.approx(5.1 + 2 / 50)
    assert bucket.ready_at(5.0, 1, not_before=7.0) == 7.0
    bucket.take(5.0)
    # the lease is late (the round trip has not come back): never a turn in the past
    assert bucket.ready_at(5.15, 1) == pytest.approx(5.25)
    assert bucket.ready_at(5.3, 3) == pytest.approx(5.3 + 3 / 50), "overdue: the share's refill"


def test_the_next_lease_is_sized_to_recent_use_and_doubles_while_it_ran_dry() -> None:
    bucket = LeasedBucket(rate_per_s=100, burst=10, period_s=0.1, now=0.0)
    assert bucket.wanted(waiting=0) == 1, "a quiet process asks for one"
    bucket.lease_granted(1, members=1, now=0.0)
    assert bucket.wanted(waiting=0) == 0, "it holds one already"
    bucket.take(0.0)
    assert not bucket.take(0.0)  # ran dry
    assert bucket.wanted(waiting=0) == 3, "used 1 (×1.25, +1), doubled from 1 as it ran dry: 3"
    bucket.lease_granted(3, members=1, now=0.1)
    for _ in range(3):
        bucket.take(0.1)
    bucket.take(0.1)
    assert bucket.wanted(waiting=5) == 10, "3 used → 5, +5 waiting: 10; doubled from 3: 6; the larger"
    bucket.lease_granted(10, members=1, now=0.2)
    for _ in range(10):
        bucket.take(0.2)
    bucket.take(0.2)
    assert bucket.wanted(waiting=50) == bucket.max_lease == 20, "never more than two periods' worth"


def test_a_token_given_back_is_spent_again_and_not_counted_as_used() -> None:
    bucket = LeasedBucket(rate_per_s=10, burst=2, period_s=0.1, now=0.0)
    bucket.lease_granted(1, members=1, now=0.0)
    assert bucket.take(0.0)
    bucket.give_back(0.0)
    assert bucket.level(0.0) == 1 and bucket.used == 0


def test_redis_away_the_bucket_refills_at_the_fleet_share_then_leases_again() -> None:
    bucket = LeasedBucket(rate_per_s=40, burst=4, period_s=0.05, now=0.0)
    bucket.lease_granted(2, members=2, now=0.0)
    bucket.fall_back(1.0)
    assert bucket.share == 20 and bucket.share_burst == 2
    assert bucket.level(1.0) == 2
    assert bucket.take(1.0) and bucket.take(1.0) and not bucket.take(1.0)
    assert bucket.level(1.05) == pytest.approx(1.0), "20/s: one token in 50 ms"
    assert bucket.ready_at(1.0, 3) == pytest.approx(1.15)
    assert bucket.level(10.0) == 2, "at most its share of the burst"
    facts = bucket.shared_facts()
    assert facts is not None and facts["mode"] == "fallback" and facts["share_per_s"] == 20
    bucket.recover(10.0)
    assert not bucket.fallback and bucket.level(10.0) == 2


def test_a_reload_keeps_the_pool_within_the_new_lease() -> None:
    bucket = LeasedBucket(rate_per_s=100, burst=10, period_s=0.1, now=0.0)
    bucket.lease_granted(15, members=1, now=0.0)
    bucket.reconfigure(20, 5)
    assert (bucket.rate, bucket.burst, bucket.max_lease, bucket.level(0.0)) == (20, 5, 4, 4)
