"""The Redis store's Lua scripts. Each one touches the keys of one hash tag
only (see redis_keys), so it runs on a cluster as on one server; a write
that spans tags is several scripts, in an order that leaves nothing a
reader could mistake for data (an index entry is written after its turn,
and names the `gen` of the conversation it points at). The exceptions,
which a single server runs in place of the scripts they are composed of
(the same Lua functions, one round trip): APPEND_ALL (APPEND, INDEX,
TOUCH: an append), DROP_ALL (DROP, UNINDEX, UNLIST: a delete) and
PUT_RESPONSE_ALL (the record's SET, LIST_RESPONSE and the evicted records'
DELs: a stored response).

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

# ARGV[first], ARGV[first + 1]... as a table
_TAIL = """
local function tail(first, last)
  local out = {}
  for i = first, last or #ARGV do out[#out + 1] = ARGV[i] end
  return out
end
"""

# The three steps of an append, as functions: the scripts below call them
# one per script (a cluster: one slot each) or all three in one (one server).

APPENDS_KEPT = 8

# append_turn(turns, conv, refs, record, now, ttl_ms, max_turns, new gen,
#             model or '', index keys) -> turn index, gen, refs entries to unindex
# `new gen` is random per append, so it also names the append: the last
# APPENDS_KEPT appends of a conversation are kept as `<new gen>=<turn>` in
# its `appends` field, and an append that comes again (a client that sent
# it again after a timeout, when the first had run) is answered as the first
# was, stored once.
_APPEND_TURN = """
local function append_turn(turns, conv, refs, record, now, ttl, max, new_gen, model, keys)
  ttl, max = tonumber(ttl), tonumber(max)
  local seen = redis.call('HGET', conv, 'appends')
  if seen then
    local done = string.match(' ' .. seen, ' ' .. new_gen .. '=(%d+)')
    if done then return tonumber(done), redis.call('HGET', conv, 'gen'), {} end
  end
  local stale = {}
  if redis.call('HSETNX', conv, 'gen', new_gen) == 1 then
    -- a new conversation: what an expired one of the same id indexed goes
    stale = redis.call('LRANGE', refs, 0, -1)
    redis.call('DEL', turns, refs)
  end
  local gen = redis.call('HGET', conv, 'gen')
  local n = redis.call('HINCRBY', conv, 'n', 1)
  local turn = n - 1
  redis.call('HSET', conv, 't', now)
  if model ~= '' then redis.call('HSET', conv, 'model', model) end
  redis.call('RPUSH', turns, record)
  local appends = new_gen .. '=' .. turn
  if seen then
    appends = seen .. ' ' .. appends
    local _, spaces = string.gsub(appends, ' ', ' ')
    for _ = APPENDS_KEPT, spaces do
      appends = string.sub(appends, string.find(appends, ' ', 1, true) + 1)
    end
  end
  redis.call('HSET', conv, 'appends', appends)
  for _, key in ipairs(keys) do
    redis.call('RPUSH', refs, turn .. '\\31' .. gen .. '\\31' .. key)
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
  return turn, gen, stale
end
""".replace("APPENDS_KEPT", str(APPENDS_KEPT))

# index_turn(index, recent, conversation, gen, turn, now, ttl_ms, refs entries
#            to unindex, index keys): the tenant's index and recency
_INDEX_TURN = (
    _UNINDEX
    + """
local function index_turn(index, recent, conversation, gen, turn, now, ttl, stale, keys)
  local mine = conversation .. '\\31'
  for _, entry in ipairs(stale) do unindex(index, entry, mine) end
  local incarnation = mine .. gen .. '\\31'
  turn = tonumber(turn)
  for _, key in ipairs(keys) do
    local old = redis.call('HGET', index, key)
    -- a later turn of this conversation that got here first keeps its entry
    local newer = old and string.sub(old, 1, #incarnation) == incarnation
      and tonumber(string.sub(old, #incarnation + 1)) > turn
    if not newer then redis.call('HSET', index, key, incarnation .. turn) end
  end
  redis.call('ZADD', recent, now, conversation)
  redis.call('PEXPIRE', recent, ttl)
  redis.call('PEXPIRE', index, ttl)
end
"""
)

# touch(recent, now, member, ttl_ms) -> members in the set
_TOUCH = """
local function touch(recent, now, member, ttl)
  redis.call('ZADD', recent, now, member)
  redis.call('PEXPIRE', recent, ttl)
  return redis.call('ZCARD', recent)
end
"""

# KEYS: turns, conv, refs (one conversation)
# ARGV: record, now, ttl_ms, max_turns, new gen, model or '', index keys...
# -> {turn index, gen, refs entries to unindex}
APPEND = (
    _TAIL
    + _APPEND_TURN
    + """
local turn, gen, stale = append_turn(
  KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tail(7))
return {turn, gen, stale}
"""
)

# KEYS: index, recent (one tenant)
# ARGV: conversation, gen, turn, now, ttl_ms, count of stale entries, stale
#       entries..., index keys...
INDEX = (
    _TAIL
    + _INDEX_TURN
    + """
local stale = tonumber(ARGV[6])
index_turn(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
  tail(7, 6 + stale), tail(7 + stale))
return 1
"""
)

# KEYS: a recency sorted set; ARGV: now, member, ttl_ms -> members in the set
TOUCH = (
    _TOUCH
    + """
return touch(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
"""
)

# APPEND, INDEX and TOUCH as one script, for one server (its keys span
# slots, which a cluster refuses): the same effects, in one round trip.
# KEYS: turns, conv, refs, index, tenant's recent, recent
# ARGV: record, now, ttl_ms, max_turns, new gen, model or '', conversation,
#       `<tenant>\x1f<conversation>`, index keys...
# -> {turn index, members in recent}
APPEND_ALL = (
    _TAIL
    + _APPEND_TURN
    + _INDEX_TURN
    + _TOUCH
    + """
local keys = tail(9)
local turn, gen, stale = append_turn(
  KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], keys)
index_turn(KEYS[4], KEYS[5], ARGV[7], gen, turn, ARGV[2], ARGV[3], stale, keys)
return {turn, touch(KEYS[6], ARGV[2], ARGV[8], ARGV[3])}
"""
)

# KEYS: turns, conv; ARGV: gen, turn -> record or nil
LOOKUP = """
local meta = redis.call('HMGET', KEYS[2], 'n', 'gen')
if not meta[1] or meta[2] ~= ARGV[1] then return false end
local len = redis.call('LLEN', KEYS[1])
local position = tonumber(ARGV[2]) - (tonumber(meta[1]) - len)
if position < 0 or position >= len then return false end
return redis.call('LINDEX', KEYS[1], position)
"""

# The three steps of a delete (and of a sweep's drops), as functions, as for
# an append.

# drop(turns, conv, refs, newest last write to drop or '')
# -> 1 dropped | 0 nothing there | -1 kept (written since), last write or '', refs entries
_DROP = """
local function drop(turns, conv, refs, newest)
  local written = redis.call('HGET', conv, 't')
  if newest ~= '' and written and tonumber(written) > tonumber(newest) then
    return -1, '', {}
  end
  local existed = redis.call('EXISTS', conv)
  local entries = redis.call('LRANGE', refs, 0, -1)
  redis.call('DEL', turns, conv, refs)
  return existed, written or '', entries
end
"""

# unindex_all(index, recent, conversation, newest score to unlist or '',
#             refs entries): the tenant's index and recency
_UNINDEX_ALL = (
    _UNINDEX
    + """
local function unindex_all(index, recent, conversation, newest, entries)
  local mine = conversation .. '\\31'
  for _, entry in ipairs(entries) do unindex(index, entry, mine) end
  local score = redis.call('ZSCORE', recent, conversation)
  if score and (newest == '' or tonumber(score) <= tonumber(newest)) then
    redis.call('ZREM', recent, conversation)
  end
end
"""
)

# unlist(recent, {member, newest score to remove or '', ...}) -> members removed
_UNLIST = """
local function unlist(recent, members)
  local removed = 0
  for i = 1, #members, 2 do
    local score = redis.call('ZSCORE', recent, members[i])
    if score and (members[i + 1] == '' or tonumber(score) <= tonumber(members[i + 1])) then
      removed = removed + redis.call('ZREM', recent, members[i])
    end
  end
  return removed
end
"""

# KEYS: turns, conv, refs (one conversation)
# ARGV: newest last write to drop ('' for any)
# -> {1 dropped | 0 nothing there | -1 kept (written since), last write or '', refs entries}
DROP = (
    _DROP
    + """
local status, written, entries = drop(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return {status, written, entries}
"""
)

# KEYS: index, recent (one tenant)
# ARGV: conversation, newest score to unlist ('' for any), refs entries...
UNINDEX = (
    _TAIL
    + _UNINDEX_ALL
    + """
unindex_all(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tail(3))
return 1
"""
)

# KEYS: a recency sorted set
# ARGV: member, newest score to remove ('' for any), [member, score...]
# -> members removed
UNLIST = (
    _UNLIST
    + """
return unlist(KEYS[1], ARGV)
"""
)

# DROP, UNINDEX and UNLIST as one script, for one server (a delete): the
# same effects, in one round trip.
# KEYS: turns, conv, refs, index, tenant's recent, recent
# ARGV: newest last write to drop ('' for any), conversation,
#       `<tenant>\x1f<conversation>`
# -> 1 dropped | 0 nothing there | -1 kept (written since)
DROP_ALL = (
    _DROP
    + _UNINDEX_ALL
    + _UNLIST
    + """
local status, written, entries = drop(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
if status == -1 then return -1 end
-- unlist only what was written up to the dropped incarnation's last write
local newest = written
if newest == '' then newest = ARGV[1] end
unindex_all(KEYS[4], KEYS[5], ARGV[2], newest, entries)
unlist(KEYS[6], {ARGV[3], newest})
return status
"""
)

# What a sweep drops: the expired (last write before the cutoff), then the
# least recently written beyond `max`, at most `batch` in all, plus one (the
# conversation being written may be among them, and is not dropped).
# KEYS: a recency sorted set; ARGV: cutoff, max, batch
# -> {members, expired members, {member, score, member, score...} oldest first}
OLDEST = """
local count = redis.call('ZCARD', KEYS[1])
local expired = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
local want = expired + math.max(0, count - expired - tonumber(ARGV[2]))
want = math.min(want, tonumber(ARGV[3]))
if want == 0 then return {count, expired, {}} end
return {count, expired, redis.call('ZRANGE', KEYS[1], 0, want, 'WITHSCORES')}
"""

# list_response(responses, now, member, ttl_ms, cutoff, max)
# -> the members evicted (oldest first)
_LIST_RESPONSE = """
local function list_response(responses, now, member, ttl, cutoff, max)
  redis.call('ZADD', responses, now, member)
  redis.call('ZREMRANGEBYSCORE', responses, '-inf', '(' .. cutoff)
  local excess = redis.call('ZCARD', responses) - tonumber(max)
  local evicted = {}
  if excess > 0 then
    for _, name in ipairs(redis.call('ZRANGE', responses, 0, excess)) do
      if #evicted < excess and name ~= member then
        redis.call('ZREM', responses, name)
        table.insert(evicted, name)
      end
    end
  end
  redis.call('PEXPIRE', responses, ttl)
  return evicted
end
"""

# KEYS: the responses sorted set
# ARGV: now, member, ttl_ms, cutoff, max -> the members evicted (oldest first)
LIST_RESPONSE = (
    _LIST_RESPONSE
    + """
return list_response(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
"""
)

# The record, LIST_RESPONSE and the evicted records' deletion as one script,
# for one server: the same effects, in one round trip. The evicted records'
# keys are not declared (they are known only here), which one server allows;
# each is Keys.response: `<prefix>{<tenant>:<id>}:response`.
# KEYS: the record's key, the responses sorted set
# ARGV: record, now, member, ttl_ms, cutoff, max, key prefix
# -> the members evicted (oldest first)
PUT_RESPONSE_ALL = (
    _LIST_RESPONSE
    + """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
local evicted = list_response(KEYS[2], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
for _, member in ipairs(evicted) do
  local sep = string.find(member, '\\31', 1, true)
  redis.call('DEL', ARGV[7] .. '{' .. string.sub(member, 1, sep - 1) .. ':'
    .. string.sub(member, sep + 1) .. '}:response')
end
return evicted
"""
)

BY_NAME = {
    "APPEND": APPEND,
    "INDEX": INDEX,
    "TOUCH": TOUCH,
    "APPEND_ALL": APPEND_ALL,
    "LOOKUP": LOOKUP,
    "DROP": DROP,
    "UNINDEX": UNINDEX,
    "UNLIST": UNLIST,
    "DROP_ALL": DROP_ALL,
    "OLDEST": OLDEST,
    "LIST_RESPONSE": LIST_RESPONSE,
    "PUT_RESPONSE_ALL": PUT_RESPONSE_ALL,
}
