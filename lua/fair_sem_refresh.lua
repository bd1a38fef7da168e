-- fair_sem_refresh.lua: keep the places of a fair semaphore's live waiters, and
-- say which of them is at the head with permits available (it should try).
--
-- KEYS[1..4] as in fair_sem_prelude.lua (semaphore, queue, places, channels)
-- ARGV[1]  how long a place is kept from now, whole ms >= 1
-- ARGV[2..] the caller's waiter ids
--
-- Returns one entry per waiter id: 0 when it has no place (it lapsed, or was
-- never taken; nothing is added), 1 when its place now lapses ARGV[1] from the
-- server's clock, 2 when it is also at the head of the queue and some permits
-- are available (how many it wants is the caller's to judge).
--
-- Lapsed waiters are first dropped from the head, and the new head is told on
-- its channel: with the waiters of live processes refreshing every third of
-- the lease, a dead head holds the queue up for about one place lease.
local place = tonumber(ARGV[1])
if place == nil or place < 1 or place ~= math.floor(place) then
  return redis.error_reply('ERR lockwarden: place lease must be a whole number of milliseconds >= 1')
end
if #ARGV < 2 then
  return redis.error_reply('ERR lockwarden: refresh needs at least one waiter id')
end
local type_error = fair_sem_type_error()
if type_error then
  return type_error
end
local have, refused = number_at_key()
if refused then
  return refused
end
local now = server_ms()

local keep_needs = {
  {'PEXPIRE on the queue', 'pexpire', KEYS[2], ARGV[1]},
  {'PEXPIRE on the places', 'pexpire', KEYS[3], ARGV[1]},
  {'ZADD on the places', 'zadd', KEYS[3], 'xx', '1', ARGV[2]},
  {'ZRANGE on the places', 'zrange', KEYS[3], '-1', '-1', 'withscores'},
}
local popped = drop_lapsed(now, keep_needs)

local present = {}
local any = false
for i = 2, #ARGV do
  present[i - 1] = run('ZSCORE on the places', 'zscore', KEYS[3], ARGV[i]) ~= false
  any = any or present[i - 1]
end
local head = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
if any then
  need(keep_needs)
end

local answer = {}
for i = 2, #ARGV do
  if present[i - 1] then
    redis.call('zadd', KEYS[3], 'xx', now + place, ARGV[i])
    if head == ARGV[i] and have > 0 then
      answer[i - 1] = 2
    else
      answer[i - 1] = 1
    end
  else
    answer[i - 1] = 0
  end
end
if any then
  keep_queue(now, place)
end
if popped > 0 and head then
  redis.call('publish', waiter_channel(head), '0')
end
return answer
