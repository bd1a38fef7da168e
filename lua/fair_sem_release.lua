-- fair_sem_release.lua: give permits back to a fair semaphore (or add new
-- ones): tell the plain waiters on the semaphore's channel, as sem_release.lua
-- does, and the head of the fair queue on its own channel.
--
-- KEYS[1..4] as in fair_sem_prelude.lua (semaphore, queue, places, channels)
-- KEYS[5]  the semaphore's channel, redisson_sc:{<name>}
-- KEYS[6]  the op marker of this give-back (once_prelude.lua)
-- ARGV[1]  permits to add, >= 1
-- ARGV[2]  the most permits the key may hold (Redisson reads it as a Java int)
-- ARGV[3]  the op marker's lifetime in ms
--
-- Returns {1, available, created} after adding (created: 1 when the key was
-- absent), or {-1, available} when the sum would pass ARGV[2] (nothing written).
-- A copy of a give-back that already ran adds nothing: {1, available, 0}.
-- Lapsed waiters are dropped from the head first, so the permits go to a live one.
local add = tonumber(ARGV[1])
if add == nil or add < 1 or add ~= math.floor(add) then
  return redis.error_reply('ERR lockwarden: permits must be a whole number >= 1')
end
local type_error = fair_sem_type_error()
if type_error then
  return type_error
end
local ttl = once_ttl(3)
local have, refused, absent = number_at_key()
if refused then
  return refused
end
if once_seen(KEYS[6]) then
  return {1, have, 0}
end
local available = have + add
if available > tonumber(ARGV[2]) then
  return {-1, have}
end
local needs = {
  {'INCRBY on the semaphore', 'incrby', KEYS[1], ARGV[1]},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[5], '0'},
  {'PUBLISH on a waiter channel', 'publish', waiter_channel('x'), '0'},
  once_need(KEYS[6]),
}
need(needs)
drop_lapsed(server_ms(), needs)
-- INCRBY rather than SET: a TTL a Java user put on the semaphore stays.
redis.call('incrby', KEYS[1], ARGV[1])
once_note(KEYS[6], 'given', ttl)
redis.call('publish', KEYS[5], available)
tell_head()
if absent then
  return {1, available, 1}
end
return {1, available, 0}
