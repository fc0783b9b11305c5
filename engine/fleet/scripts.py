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
-- KEYS: opens:<tool>, tool:<tool>, quorum:<tool>, fleet_open:<tool>
-- ARGV: member, window_ms, quorum, open_ms (the reporter's open period for the tool)
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
local count = redis.call('ZCARD', KEYS[1])
if count >= tonumber(ARGV[3]) and redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', window) then
  local epoch = redis.call('HINCRBY', KEYS[2], 'open_epoch', 1)
  redis.call('HSET', KEYS[2], 'open_count', count, 'fleet_open', 1)
  redis.call('SET', KEYS[4], count, 'PX', tonumber(ARGV[4]))
  return {count, epoch}
end
return {count, 0}
"""
)
"""A process opened a tool on its own: count it; the quorum reached opens the tool fleet-wide
(once per window: the ``quorum`` key stands until the window ends or a probe closes the tool), and
``fleet_open`` stands for the open period: a process joining within it opens the tool too."""

PROBE_RESULT = """
-- KEYS: lease:<tool>, tool:<tool>, opens:<tool>, quorum:<tool>, fleet_open:<tool>
-- ARGV: member, outcome, open_ms
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local epoch = redis.call('HINCRBY', KEYS[2], 'probe_epoch', 1)
redis.call('HSET', KEYS[2], 'probe_outcome', ARGV[2], 'probe_by', ARGV[1])
if ARGV[2] == 'closed' then
  redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
  redis.call('HDEL', KEYS[2], 'fleet_open')
elseif redis.call('HGET', KEYS[2], 'fleet_open') == '1' then
  redis.call('SET', KEYS[5], 'probe', 'PX', tonumber(ARGV[3]))
end
return epoch
"""
"""The lease holder's probe ended (``closed`` or ``opened``): publish it and free the lease. Not
published when the lease expired and another process holds it now: that one's probe decides. A
failed probe of a tool the fleet opened starts the fleet's next open period."""

RENEW_LEASE = """
-- KEYS: lease:<tool>; ARGV: member, lease_ms
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
"""
"""Keep the lease while our probe runs (a vanished lease is taken back: the probe is ours); 0 when
another process holds it."""

RELEASE_LEASE = """
-- KEYS: lease:<tool>; ARGV: member
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
"""Free a lease this process holds (it leaves): the others need not wait for its expiry."""

SEND_COMMAND = """
-- KEYS: commands, override:<tool>; ARGV: maxlen, then the command's field, value pairs
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 2))
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'stream_id', id, unpack(ARGV, 2))
return id
"""
"""Publish an operator command and make it the tool's standing operator state, at once: a process
joining later applies the standing trip or disable (a reset stands as "nothing stands")."""

ACKNOWLEDGE = """
-- KEYS: acks:<command id>; ARGV: member, record, ttl_ms
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""
"""File one process's acknowledgement; the hash never stands without its expiry."""

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
-- KEYS: commands, then per tool (n each, in order): tool:, lease:, fleet_open:, override:
-- ARGV: the last command id seen ('' when joining: the last join_ms), n, standing (1: read the
-- overrides), join_ms
local n = tonumber(ARGV[2])
local after = ARGV[1]
if after == '' then after = tostring(now - tonumber(ARGV[4])) .. '-0' end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local newest = '0-0'
if #last > 0 then newest = last[1][1] end
local commands = redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', 100)
local tools = {}
for i = 1, n do
  local h = redis.call('HMGET', KEYS[1 + i],
    'open_epoch', 'open_count', 'probe_epoch', 'probe_outcome', 'probe_by')
  local lease = redis.call('GET', KEYS[1 + n + i])
  local open_ms = redis.call('PTTL', KEYS[1 + 2 * n + i])
  local standing = {}
  if ARGV[3] == '1' then standing = redis.call('HGETALL', KEYS[1 + 3 * n + i]) end
  tools[i] = {h[1] or '0', h[2] or '0', h[3] or '0', h[4] or '', h[5] or '', lease or '', open_ms,
    standing}
end
return {tostring(now), newest, commands, tools, after}
"""
)
"""One read of everything a process applies: new operator commands, each tool's fleet-open and
probe-result epochs, its lease holder and what is left of the fleet's open period (ms; negative:
none); when joining or back, each tool's standing operator command. With the server's time, the
newest command id and the id read from (joining: ``join_ms`` back by the server's clock, so a
process whose clock is off still reads the commands that may be valid)."""

__all__ = [
    "ACKNOWLEDGE",
    "HEARTBEAT",
    "PROBE_RESULT",
    "RELEASE_LEASE",
    "RENEW_LEASE",
    "REPORT_OPEN",
    "SEND_COMMAND",
    "SYNC",
]
