-- fair_prelude.lua: helpers shared by fair_acquire.lua, fair_release.lua and
-- fair_refresh.lua. Redis scripts cannot include one another, so the crate puts this
-- file in front of each of them when it builds the script (src/wire/fair.rs). That
-- keeps the fair lock's central rule, "every fair script first drops lapsed waiters
-- from the head of the queue", in one place. It only defines functions: it writes
-- nothing and returns nothing, but `run` and `need` end the script with an error
-- reply (error()) before its first write.
--
-- Every user passes the same first three keys: KEYS[1] the lock hash, KEYS[2] the
-- queue list, KEYS[3] the deadline zset.

-- ACL (Redis 7+): `acl`, `deny`, `run` and `need` come from acl_prelude.lua, which
-- src/wire/fair.rs puts in front of this file. As in acquire.lua, the commands that
-- follow a script's first write are asked for first, on the path taken, and the
-- reads up to the first write run with redis.pcall (`run`).

-- The lists `a` and `b` as one new list.
local function both(a, b)
  local all = {}
  for _, c in ipairs(a) do all[#all + 1] = c end
  for _, c in ipairs(b) do all[#all + 1] = c end
  return all
end

-- An error reply when a key holds another type than a fair lock uses, else nil.
local function fair_type_error()
  local names = {'the lock', 'the queue', 'the deadlines'}
  for i, want in ipairs({'hash', 'list', 'zset'}) do
    local kind = run('TYPE on ' .. names[i], 'type', KEYS[i]).ok
    if kind ~= 'none' and kind ~= want then
      return redis.error_reply('WRONGTYPE lockwarden: ' .. KEYS[i] .. ' is a ' .. kind .. ', not a ' .. want)
    end
  end
  return nil
end

-- Milliseconds on the Redis server's clock (deadlines never depend on a client's),
-- and the raw TIME reply {seconds, microseconds} for callers that need more detail
-- (seeding the fencing counter). Every user calls it before its first write.
local function server_ms()
  local t = run('TIME', 'time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- Drops waiters whose place has lapsed at `now`, from the head only (the others are
-- dropped when they reach it: behind a live head they hold nobody up). Returns how
-- many were dropped. LPOP and ZREM are never refused when Redis is out of memory.
--
-- The first LPOP is the script's first write: before it, every command the rest
-- of the script may run is asked for (`later(first)`, the caller's list; the
-- popped waiter's field `first` stands for the next head's in a channel name).
-- That is every path's commands at once, but only on this rare path (a waiter
-- died at the head of the queue). LINDEX and ZSCORE ran before it, so they are
-- allowed when the loop repeats them.
local function drop_lapsed(now, later)
  local popped = 0
  while true do
    local first = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
    if not first then break end
    local deadline = tonumber(run('ZSCORE on the deadlines', 'zscore', KEYS[3], first))
    if deadline ~= nil and deadline > now then break end
    if popped == 0 then
      need({{'ZREM on the deadlines', 'zrem', KEYS[3], first}})
      need(later(first))
      run('LPOP on the queue', 'lpop', KEYS[2])
    else
      redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], first)
    popped = popped + 1
  end
  return popped
end
