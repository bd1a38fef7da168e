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
-- Runs with lua/fair_prelude.lua in front (fair_type_error, server_ms, drop_lapsed).
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
local popped = drop_lapsed(now)

local present = {}
local any = false
for i = 2, #ARGV do
  present[i - 1] = redis.call('zscore', KEYS[3], ARGV[i]) ~= false
  any = any or present[i - 1]
end
if any then
  -- Keep the queue keys until the last deadline (this refresh's included); the
  -- PEXPIRE comes first so that the ZADDs below are not refused out of memory.
  local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')
  local keep = math.max(math.floor(tonumber(last[2]) - now), place)
  redis.call('pexpire', KEYS[2], keep)
  redis.call('pexpire', KEYS[3], keep)
end

local free = redis.call('exists', KEYS[1]) == 0
local head = redis.call('lindex', KEYS[2], 0)
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
