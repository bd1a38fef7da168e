-- fair_prelude.lua: helpers shared by fair_acquire.lua, fair_release.lua and
-- fair_refresh.lua. Redis scripts cannot include one another, so the crate puts this
-- file in front of each of them when it builds the script (src/wire/fair.rs). That
-- keeps the fair lock's central rule, "every fair script first drops lapsed waiters
-- from the head of the queue", in one place. It only defines functions: it writes
-- nothing and returns nothing.
--
-- Every user passes the same first three keys: KEYS[1] the lock hash, KEYS[2] the
-- queue list, KEYS[3] the deadline zset.

-- An error reply when a key holds another type than a fair lock uses, else nil.
local function fair_type_error()
  for i, want in ipairs({'hash', 'list', 'zset'}) do
    local kind = redis.call('type', KEYS[i]).ok
    if kind ~= 'none' and kind ~= want then
      return redis.error_reply('WRONGTYPE lockwarden: ' .. KEYS[i] .. ' is a ' .. kind .. ', not a ' .. want)
    end
  end
  return nil
end

-- Milliseconds on the Redis server's clock (deadlines never depend on a client's),
-- and the raw TIME reply {seconds, microseconds} for callers that need more detail
-- (seeding the fencing counter).
local function server_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- Drops waiters whose place has lapsed at `now`, from the head only (the others are
-- dropped when they reach it: behind a live head they hold nobody up). Returns how
-- many were dropped. LPOP and ZREM are never refused when Redis is out of memory.
local function drop_lapsed(now)
  local popped = 0
  while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if not first then break end
    local deadline = tonumber(redis.call('zscore', KEYS[3], first))
    if deadline ~= nil and deadline > now then break end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], first)
    popped = popped + 1
  end
  return popped
end

