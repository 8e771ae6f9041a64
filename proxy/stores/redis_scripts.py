"""The Redis store's Lua scripts. Each one touches the keys of one hash tag
only (see redis_keys), so it runs on a cluster as on one server; a write
that spans tags is several scripts, in an order that leaves nothing a
reader could mistake for data (an index entry is written after its turn,
and names the `gen` of the conversation it points at).

A refs entry (what a conversation wrote to its tenant's index) is
`<turn>\\x1f<gen>\\x1f<index key>`; the index entry it wrote is
`<conversation>\\x1f<gen>\\x1f<turn>`. Unindexing deletes an index entry only
while it still equals the one the refs entry describes, so a newer entry
under the same key is left alone.
"""

from __future__ import annotations

# unindex(index, entry, mine): `mine` is `<conversation>\x1f`
_UNINDEX = """
local function split(entry)
  local a = string.find(entry, '\\31', 1, true)
  local b = string.find(entry, '\\31', a + 1, true)
  return string.sub(entry, 1, a - 1), string.sub(entry, a + 1, b - 1), string.sub(entry, b + 1)
end
local function unindex(index, entry, mine)
  local turn, gen, key = split(entry)
  if redis.call('HGET', index, key) == mine .. gen .. '\\31' .. turn then
    redis.call('HDEL', index, key)
  end
end
"""

# KEYS: turns, conv, refs (one conversation)
# ARGV: record, now, ttl_ms, max_turns, new gen, model or '', index keys...
# -> {turn index, gen, refs entries to unindex}
APPEND = """
local turns, conv, refs = KEYS[1], KEYS[2], KEYS[3]
local ttl, max = tonumber(ARGV[3]), tonumber(ARGV[4])
local stale = {}
if redis.call('HSETNX', conv, 'gen', ARGV[5]) == 1 then
  -- a new conversation: what an expired one of the same id indexed goes
  stale = redis.call('LRANGE', refs, 0, -1)
  redis.call('DEL', turns, refs)
end
local gen = redis.call('HGET', conv, 'gen')
local n = redis.call('HINCRBY', conv, 'n', 1)
local turn = n - 1
redis.call('HSET', conv, 't', ARGV[2])
if ARGV[6] ~= '' then redis.call('HSET', conv, 'model', ARGV[6]) end
redis.call('RPUSH', turns, ARGV[1])
for i = 7, #ARGV do
  redis.call('RPUSH', refs, turn .. '\\31' .. gen .. '\\31' .. ARGV[i])
end
local first = n - max  -- the oldest turn kept
if first > 0 then
  redis.call('LTRIM', turns, -max, -1)
  while true do
    local entry = redis.call('LINDEX', refs, 0)
    if not entry then break end
    local sep = string.find(entry, '\\31', 1, true)
    if tonumber(string.sub(entry, 1, sep - 1)) >= first then break end
    redis.call('LPOP', refs)
    table.insert(stale, entry)
  end
end
redis.call('PEXPIRE', turns, ttl)
redis.call('PEXPIRE', conv, ttl)
-- refs outlive the conversation, so a sweep can still unindex an expired one
redis.call('PEXPIRE', refs, 2 * ttl)
return {turn, gen, stale}
"""

# KEYS: index, recent (one tenant)
# ARGV: conversation, gen, turn, now, ttl_ms, count of stale entries, stale
#       entries..., index keys...
INDEX = (
    _UNINDEX
    + """
local index = KEYS[1]
local mine = ARGV[1] .. '\\31'
local stale = tonumber(ARGV[6])
for i = 7, 6 + stale do unindex(index, ARGV[i], mine) end
local incarnation = mine .. ARGV[2] .. '\\31'
local turn = tonumber(ARGV[3])
for i = 7 + stale, #ARGV do
  local old = redis.call('HGET', index, ARGV[i])
  -- a later turn of this conversation that got here first keeps its entry
  local newer = old and string.sub(old, 1, #incarnation) == incarnation
    and tonumber(string.sub(old, #incarnation + 1)) > turn
  if not newer then redis.call('HSET', index, ARGV[i], incarnation .. ARGV[3]) end
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('PEXPIRE', index, ARGV[5])
return 1
"""
)

# KEYS: a recency sorted set; ARGV: now, member, ttl_ms -> members in the set
TOUCH = """
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('ZCARD', KEYS[1])
"""

# KEYS: turns, conv; ARGV: gen, turn -> record or nil
LOOKUP = """
local meta = redis.call('HMGET', KEYS[2], 'n', 'gen')
if not meta[1] or meta[2] ~= ARGV[1] then return false end
local len = redis.call('LLEN', KEYS[1])
local position = tonumber(ARGV[2]) - (tonumber(meta[1]) - len)
if position < 0 or position >= len then return false end
return redis.call('LINDEX', KEYS[1], position)
"""

# KEYS: turns, conv, refs (one conversation)
# ARGV: newest last write to drop ('' for any)
# -> {1 dropped | 0 nothing there | -1 kept (written since), last write or '', refs entries}
DROP = """
local written = redis.call('HGET', KEYS[2], 't')
if ARGV[1] ~= '' and written and tonumber(written) > tonumber(ARGV[1]) then
  return {-1, '', {}}
end
local existed = redis.call('EXISTS', KEYS[2])
local refs = redis.call('LRANGE', KEYS[3], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {existed, written or '', refs}
"""

# KEYS: index, recent (one tenant)
# ARGV: conversation, newest score to unlist ('' for any), refs entries...
UNINDEX = (
    _UNINDEX
    + """
local mine = ARGV[1] .. '\\31'
for i = 3, #ARGV do unindex(KEYS[1], ARGV[i], mine) end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if score and (ARGV[2] == '' or tonumber(score) <= tonumber(ARGV[2])) then
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 1
"""
)

# KEYS: a recency sorted set; ARGV: member, newest score to remove ('' for any)
UNLIST = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and (ARGV[2] == '' or tonumber(score) <= tonumber(ARGV[2])) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""

# KEYS: the responses sorted set
# ARGV: now, member, ttl_ms, cutoff, max -> the members evicted (oldest first)
LIST_RESPONSE = """
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[4])
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[5])
local evicted = {}
if excess > 0 then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, excess)) do
    if #evicted < excess and member ~= ARGV[2] then
      redis.call('ZREM', KEYS[1], member)
      table.insert(evicted, member)
    end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return evicted
"""

BY_NAME = {
    "APPEND": APPEND,
    "INDEX": INDEX,
    "TOUCH": TOUCH,
    "LOOKUP": LOOKUP,
    "DROP": DROP,
    "UNINDEX": UNINDEX,
    "UNLIST": UNLIST,
    "LIST_RESPONSE": LIST_RESPONSE,
}
