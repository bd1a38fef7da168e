-- fair_refresh.lua: keep the places of live fair-lock waiters in the queue, and
-- tell the caller which of them may take the lock now.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines, redisson_lock_timeout:{<name>}
-- KEYS[4]  the unlock channel, redisson_lock__channel:{<name>}
-- ARGV[1]  how long a place is kept from now, whole milliseconds >= 1
-- ARGV[2..] the owner fields of the caller's waiters
--
-- Returns one entry per owner field: 0 when it has no place in the queue (it lapsed
-- or was never taken; nothing is added), 1 when its deadline is now ARGV[1] from
-- the server's clock, 2 when it is also at the head of the queue and the lock is
-- free (it should try now).
--
-- Lapsed waiters are first dropped from the head, as in every fair-lock script, and
-- if that leaves a free lock the new head is told on its channel. The first write
-- is LPOP, ZREM or PEXPIRE, none refused out of memory, so refreshing keeps working
-- when Redis is full (ZADD after a write is not refused either).
--
-- Every command after the first write is asked for before it (ACL, Redis 7+), and
-- a denied read is named: see fair_prelude.lua.
--
-- Runs with lua/fair_prelude.lua in front (run, need, both, fair_type_error,
-- server_ms, drop_lapsed).
local place = tonumber(ARGV[1])
if place == nil or place < 1 or place ~= math.floor(place) then
  return redis.error_reply('ERR lockwarden: place lease must be a whole number of milliseconds >= 1')
end
if #ARGV < 2 then
  return redis.error_reply('ERR lockwarden: refresh needs at least one owner field')
end
local type_error = fair_type_error()
if type_error then
  return type_error
end

local now = server_ms()

-- ACL (see fair_prelude.lua): keeping the places is PEXPIRE on both queue keys
-- and ZADD; after a pop, the reads below come after the first write too.
local keep_needs = {
  {'PEXPIRE on the queue', 'pexpire', KEYS[2], ARGV[1]},
  {'PEXPIRE on the deadlines', 'pexpire', KEYS[3], ARGV[1]},
  {'ZADD on the deadlines', 'zadd', KEYS[3], 'xx', '1', ARGV[2]},
}
local popped = drop_lapsed(now, function(first)
  return both(keep_needs, {
    {'ZRANGE on the deadlines', 'zrange', KEYS[3], '-1', '-1', 'withscores'},
    {'EXISTS on the lock', 'exists', KEYS[1]},
    {'PUBLISH on a waiter channel', 'publish', KEYS[4] .. ':' .. first, '0'},
  })
end)

local present = {}
local any = false
for i = 2, #ARGV do
  present[i - 1] = run('ZSCORE on the deadlines', 'zscore', KEYS[3], ARGV[i]) ~= false
  any = any or present[i - 1]
end
-- Read before the writes below, which change neither.
local free = run('EXISTS on the lock', 'exists', KEYS[1]) == 0
local head = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
if any then
  -- Keep the queue keys until the last deadline (this refresh's included); the
  -- PEXPIRE comes first so that the ZADDs below are not refused out of memory.
  local last = run('ZRANGE on the deadlines', 'zrange', KEYS[3], -1, -1, 'withscores')
  local keep = math.max(math.floor(tonumber(last[2]) - now), place)
  need(keep_needs)
  redis.call('pexpire', KEYS[2], keep)
  redis.call('pexpire', KEYS[3], keep)
end

local answer = {}
for i = 2, #ARGV do
  if present[i - 1] then
    redis.call('zadd', KEYS[3], 'xx', now + place, ARGV[i])
    if free and head == ARGV[i] then
      answer[i - 1] = 2
    else
      answer[i - 1] = 1
    end
  else
    answer[i - 1] = 0
  end
end

if popped > 0 and free and head then
  redis.call('publish', KEYS[4] .. ':' .. head, '0')
end
return answer
