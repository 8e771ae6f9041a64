"""Writes a Redis store in the key format of the version before the
hash-tagged scheme, with that version's own scripts (copied unchanged), so
the migration test reads what a real older proxy left behind."""

from __future__ import annotations

import redis

from proxy.reasoning.blocks import Turn
from proxy.stores.base import TurnRefs, encode_turn

_UNINDEX = """
local function turn_of(entry)
  return tonumber(string.sub(entry, 1, string.find(entry, '\\31', 1, true) - 1))
end
local function unindex(index, entry, prefix, exact)
  local sep = string.find(entry, '\\31', 1, true)
  local key = string.sub(entry, sep + 1)
  local ref = redis.call('HGET', index, key)
  if not ref then return end
  if exact then
    if ref == prefix .. string.sub(entry, 1, sep - 1) then redis.call('HDEL', index, key) end
  elseif string.sub(ref, 1, #prefix) == prefix then
    redis.call('HDEL', index, key)
  end
end
"""


APPEND = (
    _UNINDEX
    + """
local turns, conv, refs, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, max = tonumber(ARGV[3]), tonumber(ARGV[4])
local mine = ARGV[5] .. '\\31'
if redis.call('HSETNX', conv, 'gen', ARGV[6]) == 1 then
  -- a new conversation: forget what an expired one of the same id left behind
  for _, entry in ipairs(redis.call('LRANGE', refs, 0, -1)) do
    unindex(index, entry, mine, false)
  end
  redis.call('DEL', turns, refs)
end
local ref = mine .. redis.call('HGET', conv, 'gen') .. '\\31'
local n = redis.call('HINCRBY', conv, 'n', 1)
local turn = n - 1
if ARGV[7] ~= '' then redis.call('HSET', conv, 'model', ARGV[7]) end
redis.call('RPUSH', turns, ARGV[1])
for i = 9, #ARGV do
  redis.call('HSET', index, ARGV[i], ref .. turn)
  redis.call('RPUSH', refs, turn .. '\\31' .. ARGV[i])
end
local first = n - max  -- the oldest turn kept
if first > 0 then
  redis.call('LTRIM', turns, -max, -1)
  while true do
    local entry = redis.call('LINDEX', refs, 0)
    if not entry or turn_of(entry) >= first then break end
    redis.call('LPOP', refs)
    unindex(index, entry, ref, true)
  end
end
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[5])
redis.call('ZADD', KEYS[6], ARGV[2], ARGV[8])
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ttl) end
redis.call('PEXPIRE', refs, 2 * ttl)
return {turn, redis.call('ZCARD', KEYS[6])}
"""
)


PUT_RESPONSE = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
local dropped = 0
if excess > 0 then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, excess)) do
    if dropped < excess and member ~= ARGV[6] then
      local sep = string.find(member, '\\31', 1, true)
      local tenant, id = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
      redis.call('DEL', ARGV[7] .. tenant .. ':' .. id)
      redis.call('ZREM', KEYS[2], member)
      dropped = dropped + 1
    end
  end
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return dropped
"""


def append_old(
    r: redis.Redis,
    tenant: str,
    conversation: str,
    turn: Turn,
    refs: TurnRefs,
    *,
    now: float,
    ttl_ms: int = 600_000,
    max_turns: int = 1000,
    gen: str = "0123456789abcdef",
) -> int:
    keys = [
        f"rp:turns:{tenant}:{conversation}",
        f"rp:conv:{tenant}:{conversation}",
        f"rp:refs:{tenant}:{conversation}",
        f"rp:index:{tenant}",
        f"rp:recent:{tenant}",
        "rp:recent",
    ]
    args = [encode_turn(turn), now, ttl_ms, max_turns, conversation, gen, turn.model or ""]
    args += [f"{tenant}\x1f{conversation}", *refs.index_keys()]
    index, _ = r.register_script(APPEND)(keys=keys, args=args)
    return int(index)


def put_response_old(
    r: redis.Redis, tenant: str, response_id: str, record: bytes, *, now: float
) -> None:
    keys = [f"rp:resp:{tenant}:{response_id}", "rp:responses"]
    args = [record, 600_000, now, now - 600, 10_000, f"{tenant}\x1f{response_id}", "rp:resp:"]
    r.register_script(PUT_RESPONSE)(keys=keys, args=args)
