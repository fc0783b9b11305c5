"""The Lua scripts of the fleet's rate limits (:mod:`engine.fleet.rate_limits`): a cooldown shared
by every process, and a ``scope: fleet`` rate's one bucket, from which each process leases tokens.

Times are the Redis server's (``TIME``): a cooldown's end is stored as the server's wall-clock
time in ms and the key expires at it (``PEXPIREAT``), so its end is never re-armed as a fresh TTL
by whoever copies it. Every key has an expiry. A key of another type (nobody of ours wrote it)
is read as no record and replaced: it never fails the round trip that carries everything else.
"""

from __future__ import annotations

from engine.fleet.scripts import NOW_MS

PUBLISH_COOLDOWN = (
    NOW_MS
    + """
-- KEYS: cooldown:<tool>; ARGV: until_ms, force ('1': replace whatever stands), then field, value pairs
local until_ms = tonumber(ARGV[1])
if not until_ms or until_ms <= now then return 0 end
if ARGV[2] ~= '1' then
  local current = tonumber(redis.pcall('HGET', KEYS[1], 'until_ms'))  -- not a hash: replaced
  if current and current >= until_ms then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIREAT', KEYS[1], until_ms)
return 1
"""
)
"""Publish a signed cooldown unless one ending later stands (a cooldown is extended, never
shortened); ``force`` replaces a record the publisher found forged. 1 when it now stands."""

RATE_SYNC = (
    NOW_MS
    + """
-- KEYS: members, then cooldown:<tool> for n tools, then rate:<tool> for m tools
-- ARGV: n, m, stale_ms, then per rate tool: rate_per_s, capacity, tokens wanted
local n, m = tonumber(ARGV[1]), tonumber(ARGV[2])
local live = redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[3]), '+inf')
local cooldowns = {}
for i = 1, n do
  local record = redis.pcall('HGETALL', KEYS[1 + i])
  if record.err then record = {'mac', 'not a hash'} end  -- nobody of ours wrote it: unreadable
  cooldowns[i] = record
end
local grants = {}
for j = 1, m do
  local key = KEYS[1 + n + j]
  local rate, capacity, want = tonumber(ARGV[1 + 3 * j]), tonumber(ARGV[2 + 3 * j]), tonumber(ARGV[3 + 3 * j])
  local h = redis.pcall('HMGET', key, 'tokens', 'stamp')
  if h.err then redis.call('DEL', key); h = {} end  -- not a hash: nobody of ours wrote it
  local tokens, stamp = tonumber(h[1]), tonumber(h[2])
  -- a vanished key (expired: full again) or a value nobody of ours wrote reads as a full bucket
  if not tokens or not stamp or tokens ~= tokens or stamp ~= stamp or stamp > now then
    tokens, stamp = capacity, now
  end
  tokens = math.max(0, math.min(capacity, tokens + (now - stamp) * rate / 1000))
  local grant = math.max(0, math.min(want, math.floor(tokens)))
  tokens = tokens - grant
  redis.call('HSET', key, 'tokens', tostring(tokens), 'stamp', now)
  -- full again by then (a week at most: an absurdly slow rate still gets an expiry Redis takes)
  redis.call('PEXPIRE', key, math.min(math.ceil((capacity - tokens) / rate * 1000) + 1000, 604800000))
  grants[j] = grant
end
return {tostring(now), live, cooldowns, grants}
"""
)
"""One round trip's reading and leasing: the live members (a beat within ``stale_ms``: the fleet
share is ``rate / live``), each rate-limited tool's cooldown record, and for each ``scope: fleet``
tool a lease of up to ``wanted`` whole tokens taken from the fleet's bucket (refilled at
``rate_per_s`` by the server's clock, at most ``capacity``). The bucket's key expires once it would
be full again, so a vanished key is a full bucket."""

__all__ = ["PUBLISH_COOLDOWN", "RATE_SYNC"]
