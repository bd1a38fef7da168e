-- fair_sem_undo.lua: a fair semaphore's waiter left while an attempt of its id
-- may have run unseen (a lost reply), or its grant found nobody: it leaves the
-- queue, its permits go back if a copy took them, and a copy that runs later
-- takes neither permits nor a place.
--
-- KEYS[1..4] as in fair_sem_prelude.lua (semaphore, queue, places, channels)
-- KEYS[5]  the semaphore's channel, redisson_sc:{<name>}
-- KEYS[6]  the waiter's op marker (once_prelude.lua)
-- ARGV[1]  the waiter id
-- ARGV[2]  the permits its attempts asked for, >= 1
-- ARGV[3]  the op marker's lifetime in ms
--
-- Returns 1 when permits went back, 0 when no copy had taken any (the marker
-- now says 'cancelled'), 2 when a copy of this undo ran already. Only a marker
-- that says 'taken' gives anything back, so the count moves at most once.
local ttl = once_ttl(3)
local add = tonumber(ARGV[2])
if add == nil or add < 1 or add ~= math.floor(add) then
  return redis.error_reply('ERR lockwarden: permits must be a whole number >= 1')
end
local type_error = fair_sem_type_error()
if type_error then
  return type_error
end
local me = ARGV[1]
local seen = once_seen(KEYS[6])
if seen == 'back' or seen == 'cancelled' then
  return 2
end
local head_before = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
need({
  {'LREM on the queue', 'lrem', KEYS[2], '0', me},
  {'ZREM on the places', 'zrem', KEYS[3], me},
  {'INCRBY on the semaphore', 'incrby', KEYS[1], ARGV[2]},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[5], '0'},
  {'PUBLISH on a waiter channel', 'publish', waiter_channel('x'), '0'},
  once_need(KEYS[6]),
})
redis.call('lrem', KEYS[2], 0, me)
redis.call('zrem', KEYS[3], me)
local back = 0
if seen == 'taken' then
  local have, refused = number_at_key()
  if refused then
    return refused
  end
  local now = redis.call('incrby', KEYS[1], ARGV[2])
  redis.call('publish', KEYS[5], now)
  once_note(KEYS[6], 'back', ttl)
  back = 1
else
  once_note(KEYS[6], 'cancelled', ttl)
end
local head = redis.call('lindex', KEYS[2], 0)
if head and (back == 1 or head ~= head_before) then
  redis.call('publish', waiter_channel(head), '0')
end
return back
