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
-- KEYS: opens:<tool>, tool:<tool>, quorum:<tool>, fleet_open:<tool>, fleet_opens
-- ARGV: member, window_ms, quorum, open_ms (the reporter's open period for the tool), tool
local window = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('PEXPIRE', KEYS[1], window)
local count = redis.call('ZCARD', KEYS[1])
if count >= tonumber(ARGV[3]) and redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', window) then
  local epoch = redis.call('HINCRBY', KEYS[2], 'open_epoch', 1)
  redis.call('HSET', KEYS[2], 'open_count', count, 'fleet_open', 1)
  redis.call('SET', KEYS[4], count, 'PX', tonumber(ARGV[4]))
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[4]), ARGV[5])
  return {count, epoch}
end
return {count, 0}
"""
)
"""A process opened a tool on its own: count it; the quorum reached opens the tool fleet-wide
(once per window: the ``quorum`` key stands until the window ends or a probe closes the tool), and
``fleet_open`` stands for the open period: a process joining within it opens the tool too (the
``fleet_opens`` index says so to a process that has not registered the tool yet)."""

PROBE_RESULT = (
    NOW_MS
    + """
-- KEYS: lease:<tool>, tool:<tool>, opens:<tool>, quorum:<tool>, fleet_open:<tool>, fleet_opens
-- ARGV: member, outcome, open_ms, tool
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
  redis.call('ZREM', KEYS[6], ARGV[4])
elseif redis.call('HGET', KEYS[2], 'fleet_open') == '1' then
  redis.call('SET', KEYS[5], 'probe', 'PX', tonumber(ARGV[3]))
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[3]), ARGV[4])
end
return epoch
"""
)
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

GENERATION_FIELD = "command_generation"
"""The field of ``tool:<tool>`` holding the generation of the last command published on the tool."""

_GENERATION = """
local function generation_of(key)
  local value = tonumber(redis.call('HGET', key, 'command_generation'))
  if not value or value ~= value or value < 0 or value == math.huge then return 0 end
  return math.floor(value)
end
"""
"""A tool's generation as the scripts read it: a value nobody of ours wrote is 0, as
:func:`engine.fleet.commands.stored_generation` reads it."""

_PUBLISH = """
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 4))
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'stream_id', id, unpack(ARGV, 4))
redis.call('HSET', KEYS[3], 'command_generation', generation)
redis.call('SADD', KEYS[4], ARGV[3])
return id
"""

SEND_COMMAND = (
    _GENERATION
    + """
-- KEYS: commands, override:<tool>, tool:<tool>, standing
-- ARGV: maxlen, the generation it follows, tool, then the command's field, value pairs
local current = generation_of(KEYS[3])
if current ~= tonumber(ARGV[2]) then
  return current
end
local generation = current + 1
"""
    + _PUBLISH
)
"""Publish an operator command and make it the tool's standing operator state, at once: a process
joining later applies the standing trip or disable (a reset stands as "nothing stands"); its stream
id. Refused when another command took the generation it was signed with: the tool's generation
now (an integer), for its sender to sign again with the next one."""

PUBLISH_AGAIN = (
    _GENERATION
    + """
-- KEYS: commands, override:<tool>, tool:<tool>, standing
-- ARGV: maxlen, its generation, tool, then the command's field, value pairs ('standing', '1' first)
local generation = tonumber(ARGV[2])
if generation_of(KEYS[3]) >= generation then
  return false
end
"""
    + _PUBLISH
)
"""Publish a tool's standing command again, as it was signed, when Redis has lost it (restarted
empty): only while nothing of its generation or newer stands. On the stream too, marked standing,
so that a process that joined meanwhile takes it as standing."""

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
-- KEYS: commands, fleet_opens, standing, then per tool (n each, in order): tool:, lease:,
-- fleet_open:, override:
-- ARGV: the last command id seen ('' when joining: the last join_ms), n, which tools' standing
-- command to read (a '1' or '0' each), join_ms, joining ('1': the tools with a standing command)
local n = tonumber(ARGV[2])
local after = ARGV[1]
if after == '' then after = tostring(now - tonumber(ARGV[4])) .. '-0' end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local newest = '0-0'
if #last > 0 then newest = last[1][1] end
local commands = redis.call('XRANGE', KEYS[1], '(' .. after, '+', 'COUNT', 100)
local tools = {}
for i = 1, n do
  local h = redis.call('HMGET', KEYS[3 + i],
    'open_epoch', 'open_count', 'probe_epoch', 'probe_outcome', 'probe_by', 'command_generation')
  local lease = redis.call('GET', KEYS[3 + n + i])
  local open_ms = redis.call('PTTL', KEYS[3 + 2 * n + i])
  local standing = {}
  if string.sub(ARGV[3], i, i) == '1' then standing = redis.call('HGETALL', KEYS[3 + 3 * n + i]) end
  tools[i] = {h[1] or '0', h[2] or '0', h[3] or '0', h[4] or '', h[5] or '', lease or '', open_ms,
    standing, h[6] or '0'}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local opens = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local standing_tools = {}
if ARGV[5] == '1' then standing_tools = redis.call('SMEMBERS', KEYS[3]) end
return {tostring(now), newest, commands, tools, after, opens, standing_tools}
"""
)
"""One read of everything a process applies: new operator commands, each tool's fleet-open and
probe-result epochs, its lease holder, what is left of the fleet's open period (ms; negative:
none) and the generation of its last command; each tool's standing operator command when asked
(joining, back, or a tool registered since); every fleet-wide open and, joining, the tools with a
standing command (for the tools this process registers later). With the server's time, the
newest command id and the id read from (joining: ``join_ms`` back by the server's clock, so a
process whose clock is off still reads the commands that may be valid)."""

__all__ = [
    "ACKNOWLEDGE",
    "GENERATION_FIELD",
    "HEARTBEAT",
    "PROBE_RESULT",
    "PUBLISH_AGAIN",
    "RELEASE_LEASE",
    "RENEW_LEASE",
    "REPORT_OPEN",
    "SEND_COMMAND",
    "SYNC",
]
