"""The bundled travel-agent tools of the seeds, with deterministic fake data.

They never fail on their own: failures come from outside (a script, a fault plan), so the
same inputs always give the same outputs. Each takes a little time, as a real service would
(40–360 ms, derived from its arguments), so latencies and countdowns look like real ones.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from engine.engine import Engine
from engine.errors import ToolError
from engine.faults import FaultInjector
from engine.kinds import ErrorKind

AIRPORT_CODES = {"SFO", "JFK", "LAX", "LHR", "CDG", "NRT", "BCN", "FCO", "AMS", "SIN"}


def _number(*parts: object, modulo: int) -> int:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % modulo


async def _work(*parts: object) -> None:
    await anyio.sleep((40 + _number(*parts, modulo=320)) / 1000)


def _airport(code: str) -> str:
    if code.upper() not in AIRPORT_CODES:
        raise ToolError(ErrorKind.INVALID_PARAMETERS, f"Invalid airport code: {code}")
    return code.upper()


async def flight_search(origin: str, destination: str, date: str = "2025-11-20") -> list[dict[str, Any]]:
    origin, destination = _airport(origin), _airport(destination)
    await _work("flights", origin, destination, date)
    return [
        {
            "flight": f"TW{_number(origin, destination, date, i, modulo=900) + 100}",
            "origin": origin,
            "destination": destination,
            "date": date,
            "price": 180 + _number(origin, destination, i, modulo=400),
        }
        for i in range(3)
    ]


async def flight_search_backup(
    origin: str, destination: str, date: str = "2025-11-20"
) -> list[dict[str, Any]]:
    flights = await flight_search(origin, destination, date)
    return [{**f, "flight": f"BK{f['flight'][2:]}", "price": f["price"] + 25} for f in flights[:2]]


async def hotel_search(city: str, nights: int = 3) -> list[dict[str, Any]]:
    await _work("hotels", city, nights)
    return [
        {
            "hotel": f"{city} {name}",
            "nights": nights,
            "price": nights * (90 + _number(city, name, modulo=160)),
        }
        for name in ("Grand", "Central", "Harbour")
    ]


async def activity_search(city: str) -> list[str]:
    await _work("activities", city)
    options = ["museum pass", "food tour", "river cruise", "bike tour", "night market"]
    start = _number(city, modulo=len(options))
    return [options[(start + i) % len(options)] for i in range(3)]


async def compare_prices(
    flights: list[dict[str, Any]], hotels: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    await _work("compare", len(flights), len(hotels or ()))
    cheapest_flight = min(flights, key=lambda f: f["price"]) if flights else None
    cheapest_hotel = min(hotels, key=lambda h: h["price"]) if hotels else None
    total = (cheapest_flight or {}).get("price", 0) + (cheapest_hotel or {}).get("price", 0)
    return {"flight": cheapest_flight, "hotel": cheapest_hotel, "total": total}


async def create_itinerary(choice: dict[str, Any], traveller: str = "guest") -> dict[str, Any]:
    await _work("itinerary", traveller)
    reference = f"IT-{_number(traveller, choice.get('total'), modulo=10**6):06d}"
    return {"reference": reference, "traveller": traveller, **choice}


async def custom_api(region: str = "eu", query: str = "") -> dict[str, Any]:
    await _work("custom", region, query)
    return {"region": region, "query": query, "score": _number(region, query, modulo=100)}


async def exchange_rates(base: str = "USD", quote: str = "EUR") -> dict[str, Any]:
    await _work("rates", base, quote)
    return {"base": base, "quote": quote, "rate": round(0.5 + _number(base, quote, modulo=1000) / 1000, 3)}


DEMO_TOOLS: dict[str, Callable[..., Awaitable[Any]]] = {
    "flight_search": flight_search,
    "flight_search_backup": flight_search_backup,
    "hotel_search": hotel_search,
    "activity_search": activity_search,
    "compare_prices": compare_prices,
    "create_itinerary": create_itinerary,
    "custom_api": custom_api,
    "exchange_rates": exchange_rates,
}


def demo_engine(
    manifests: str | Path,
    *,
    faults: FaultInjector | None = None,
    seed: int = 0,
    wall_clock: Callable[[], float] | None = None,
    record: bool = False,
    watch: bool = False,
) -> Engine:
    """An engine with the bundled travel tools registered, and the fault plan injected;
    ``watch`` hot-reloads the manifests."""
    engine = Engine(
        manifests, watch=watch, rng=random.Random(seed), faults=faults, wall_clock=wall_clock or time.time,
        record=record,
    )  # fmt: skip
    for name, fn in DEMO_TOOLS.items():
        engine.register(name, fn)
    return engine


__all__ = ["DEMO_TOOLS", "demo_engine"]
