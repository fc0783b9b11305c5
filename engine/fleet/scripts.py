"""The fleet's Lua scripts: every change of shared state is one atomic script.

Times inside them are the Redis server's (``TIME``), so processes on hosts whose clocks differ
still agree on windows and heartbeats. A key that has vanished (expired, or Redis restarted
empty) reads as no opinion: zero epochs, no lease, no opens.
"""

from __future__ import annotations

NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

REPORT_OPEN = (
    NOW_MS
    + """
-- KEYS: opens:<tool>, tool:<tool>, quorum:<tool>; ARGV: member, window_ms, quorum
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
local count = redis.call('ZCARD', KEYS[1])
if count >= tonumber(ARGV[3]) and redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', window) then
  local epoch = redis.call('HINCRBY', KEYS[2], 'open_epoch', 1)
  redis.call('HSET', KEYS[2], 'open_count', count)
  return {count, epoch}
end
return {count, 0}
"""
)
"""A process opened a tool on its own: count it; the quorum reached opens the tool fleet-wide
(once per window: the ``quorum`` key stands until the window ends or a probe closes the tool)."""

PROBE_RESULT = """
-- KEYS: lease:<tool>, tool:<tool>, opens:<tool>, quorum:<tool>; ARGV: member, outcome
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local epoch = redis.call('HINCRBY', KEYS[2], 'probe_epoch', 1)
redis.call('HSET', KEYS[2], 'probe_outcome', ARGV[2], 'probe_by', ARGV[1])
if ARGV[2] == 'closed' then
  redis.call('DEL', KEYS[3], KEYS[4])
end
return epoch
"""
"""The lease holder's probe ended (``closed`` or ``opened``): publish it and free the lease. Not
published when the lease expired and another process holds it now: that one's probe decides."""

HEARTBEAT = (
    NOW_MS
    + """
-- KEYS: members, member:<id>; ARGV: member, ttl_ms, forget_ms, then field, value pairs
redis.call('HSET', KEYS[2], 'beat', now, unpack(ARGV, 4))
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]))
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
return now
"""
)
"""A process is alive: its record (expiring ``gone_s`` after its last beat) and the index."""

SYNC = (
    NOW_MS
    + """
-- KEYS: commands, then tool:<tool> for each tool, then lease:<tool> for each tool
-- ARGV: the last command id seen, the number of tools
local n = tonumber(ARGV[2])
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local newest = '0-0'
if #last > 0 then newest = last[1][1] end
local commands = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', 100)
local tools = {}
for i = 1, n do
  local h = redis.call('HMGET', KEYS[1 + i],
    'open_epoch', 'open_count', 'probe_epoch', 'probe_outcome', 'probe_by')
  local lease = redis.call('GET', KEYS[1 + n + i])
  tools[i] = {h[1] or '0', h[2] or '0', h[3] or '0', h[4] or '', h[5] or '', lease or ''}
end
return {tostring(now), newest, commands, tools}
"""
)
"""One read of everything a process applies: new operator commands, each tool's fleet-open and
probe-result epochs and its lease holder; with the server's time and the newest command id (a
command stream younger than the last id seen was emptied: a Redis restarted empty)."""

__all__ = ["HEARTBEAT", "PROBE_RESULT", "REPORT_OPEN", "SYNC"]
