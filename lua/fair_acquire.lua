-- fair_acquire.lua: take a fair (FIFO) lock when the caller is at the head of its
-- queue, re-enter it as its owner, or take (or keep) a place in the queue.
--
-- KEYS[1]  the lock hash (the lock name itself): owner field -> hold count
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}: owner fields, head first
-- KEYS[3]  the deadlines, redisson_lock_timeout:{<name>}: owner field -> ms (server clock)
-- KEYS[4]  the fencing token counter, redisson_lock_token:{<name>}
-- KEYS[5]  the unlock channel, redisson_lock__channel:{<name>}; a waiter's own
--          channel is this followed by ':<owner field>'
-- ARGV[1]  lease in whole milliseconds, >= 1
-- ARGV[2]  owner field, "<client id>:<owner number>"
-- ARGV[3]  how long a place in the queue is kept without a refresh, whole ms >= 1
-- ARGV[4]  '1' to queue the caller when it cannot take the lock, '0' to only try
-- ARGV[5]  lifetime of the token counter in whole milliseconds, >= 1
-- ARGV[6]  '1' for a non-reentrant lock: a caller that holds it already is
--          refused; '0' or absent, it re-enters
--
-- Returns {1, token, holds} when the caller now holds the lock, or {0, wait, head}
-- when it does not: wait is how long until that may change at the latest (the
-- lock's PTTL while it is held, else the time left on the head waiter's place; -1
-- for no bound), head is the owner field at the head of the queue ('' if none);
-- {-2} when the caller holds it and ARGV[6] is '1' (nothing changed but the
-- lapsed waiters dropped).
--
-- Time is the Redis server's (TIME), never a client's. Waiters whose deadline has
-- passed are first dropped from the head of the queue; if that leaves a free lock
-- with someone else at the head, that waiter is told on its own channel, so a dead
-- waiter holds up the queue for at most one place lease.
--
-- Every argument and every key's type is checked before the first write: a script
-- is not a transaction, and an error after a write would leave that write behind.
-- For the same reason the commands after the first write are asked for before it
-- (ACL, Redis 7+), and a denied read is named: see fair_prelude.lua.
-- Out of memory, a new place is refused (its ZADD is the first write) while a
-- waiter already queued keeps its place (PEXPIRE, never refused, comes first).
--
-- Runs with lua/fair_prelude.lua in front (run, need, both, fair_type_error,
-- server_ms, drop_lapsed).
local lease = tonumber(ARGV[1])
local place = tonumber(ARGV[3])
if lease == nil or lease < 1 or lease ~= math.floor(lease) then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if place == nil or place < 1 or place ~= math.floor(place) then
  return redis.error_reply('ERR lockwarden: place lease must be a whole number of milliseconds >= 1')
end
if ARGV[2] == nil or ARGV[2] == '' then
  return redis.error_reply('ERR lockwarden: empty owner field')
end
if ARGV[4] ~= '0' and ARGV[4] ~= '1' then
  return redis.error_reply('ERR lockwarden: queue flag must be 0 or 1')
end
if ARGV[5] == nil or #ARGV[5] > 15 or not string.find(ARGV[5], '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: token lifetime must be a whole number of milliseconds >= 1')
end
if ARGV[6] ~= nil and ARGV[6] ~= '0' and ARGV[6] ~= '1' then
  return redis.error_reply('ERR lockwarden: non-reentrant flag must be 0 or 1')
end
local type_error = fair_type_error()
if type_error then
  return type_error
end

local now, t = server_ms()

-- ACL (see fair_prelude.lua): the commands of each path, asked for before its
-- first write. A grant: the taker leaves the queue (when the lock is free), takes
-- a hold, sets the lease and the token.
local function grant_needs(free)
  local c = {
    {'HINCRBY on the lock', 'hincrby', KEYS[1], ARGV[2], '1'},
    {'PEXPIRE on the lock', 'pexpire', KEYS[1], ARGV[1]},
    {'INCR on the token counter', 'incr', KEYS[4]},
    {'SET on the token counter', 'set', KEYS[4], '1', 'px', ARGV[5]},
    {'PEXPIRE on the token counter', 'pexpire', KEYS[4], ARGV[5]},
    -- The release tells the next waiter on its own channel; a holder that may
    -- not would keep the lock for a whole lease, so the grant asks first.
    {'PUBLISH on a waiter channel', 'publish', KEYS[5] .. ':' .. ARGV[2], '0'},
  }
  if free then
    c[#c + 1] = {'LREM on the queue', 'lrem', KEYS[2], '1', ARGV[2]}
    c[#c + 1] = {'ZREM on the deadlines', 'zrem', KEYS[3], ARGV[2]}
  end
  return c
end
-- A place taken or kept. (Lists are built only on the path that needs them.)
local function queue_needs()
  return {
    {'ZADD on the deadlines', 'zadd', KEYS[3], '1', ARGV[2]},
    {'RPUSH on the queue', 'rpush', KEYS[2], ARGV[2]},
    {'PEXPIRE on the queue', 'pexpire', KEYS[2], ARGV[3]},
    {'PEXPIRE on the deadlines', 'pexpire', KEYS[3], ARGV[3]},
  }
end

-- Drop waiters whose place has lapsed, from the head only (the others are dropped
-- when they reach it: behind a live head they hold nobody up). A pop comes before
-- every read below, so then all of them are asked for too.
local popped = drop_lapsed(now, function(first)
  local c = both(grant_needs(true), {
    {'EXISTS on the lock', 'exists', KEYS[1]},
    {'HEXISTS on the lock', 'hexists', KEYS[1], ARGV[2]},
    {'PTTL on the lock', 'pttl', KEYS[1]},
    {'ZRANGE on the deadlines', 'zrange', KEYS[3], '-1', '-1', 'withscores'},
    {'PUBLISH on a waiter channel', 'publish', KEYS[5] .. ':' .. first, '0'},
  })
  if ARGV[4] == '1' then
    c = both(c, queue_needs())
  end
  return c
end)

local free = run('EXISTS on the lock', 'exists', KEYS[1]) == 0
local head = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
-- A held lock is the caller's own: a re-entry (refused for a non-reentrant lock).
local mine = not free and run('HEXISTS on the lock', 'hexists', KEYS[1], ARGV[2]) == 1
if mine and ARGV[6] == '1' then
  return {-2}
end
if (free and (not head or head == ARGV[2])) or mine then
  need(grant_needs(free))
  if free then
    -- The taker leaves the queue (it is its head, or the queue is empty).
    redis.call('lrem', KEYS[2], 1, ARGV[2])
    redis.call('zrem', KEYS[3], ARGV[2])
  end
  local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], lease)
  local now_us = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  -- Never below the server clock in microseconds, and the counter expires after
  -- a long idle time: see lua/token_prelude.lua.
  local token = redis.call('incr', KEYS[4])
  if token <= tonumber(now_us) then
    token = tonumber(now_us)
    redis.call('set', KEYS[4], now_us, 'px', ARGV[5])
  else
    redis.call('pexpire', KEYS[4], ARGV[5])
  end
  return {1, token, holds}
end

-- Read before any write of a place (the answer is the same: nothing here changes
-- the lock's TTL), so that it need not be asked for.
local pttl
if not free then
  pttl = run('PTTL on the lock', 'pttl', KEYS[1])
end

if ARGV[4] == '1' then
  -- The queue keys expire once every deadline in them has passed, so a queue of
  -- waiters that all died does not stay behind.
  local last = run('ZRANGE on the deadlines', 'zrange', KEYS[3], -1, -1, 'withscores')
  local keep = place
  if last[2] then
    keep = math.max(math.floor(tonumber(last[2]) - now), place)
  end
  local queued = run('ZSCORE on the deadlines', 'zscore', KEYS[3], ARGV[2])
  need(queue_needs())
  if queued then
    -- Already queued: keep the place. PEXPIRE first, never refused out of
    -- memory, so that a waiter keeps its place even then.
    redis.call('pexpire', KEYS[2], keep)
    redis.call('pexpire', KEYS[3], keep)
    redis.call('zadd', KEYS[3], 'xx', now + place, ARGV[2])
  else
    -- A new place: ZADD first, refused out of memory before anything is written
    -- (unless lapsed waiters were dropped above).
    redis.call('zadd', KEYS[3], now + place, ARGV[2])
    redis.call('rpush', KEYS[2], ARGV[2])
    redis.call('pexpire', KEYS[2], keep)
    redis.call('pexpire', KEYS[3], keep)
  end
  -- LINDEX ran above: allowed.
  head = redis.call('lindex', KEYS[2], 0)
end

if popped > 0 and free and head and head ~= ARGV[2] then
  redis.call('publish', KEYS[5] .. ':' .. head, '0')
end

local wait = -1
if not free then
  wait = pttl
elseif head then
  -- ZSCORE ran above whenever there is a head (in drop_lapsed or for the place).
  local deadline = tonumber(redis.call('zscore', KEYS[3], head))
  if deadline ~= nil then
    wait = math.max(deadline - now, 0)
  end
end
return {0, wait, head or ''}
