-- sem_undo.lua: a waiter of a plain semaphore left (its deadline passed, its
-- caller went away, or the grant found nobody) while an attempt of its op id may
-- have taken permits: give them back if a copy took them, and make sure no copy
-- that runs later takes any.
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  its channel, redisson_sc:{<name>}
-- KEYS[3]  the waiter's op marker (once_prelude.lua)
-- ARGV[1]  the permits its attempts asked for, >= 1
-- ARGV[2]  the op marker's lifetime in ms
--
-- Returns 1 when permits went back, 0 when no copy had taken any (the marker
-- now says 'cancelled'), 2 when they were given back before (a copy of this
-- undo ran already). Only a marker that says 'taken' gives anything back, so the
-- count moves at most once whatever the order the copies run in.
local ttl = once_ttl(2)
local seen = once_seen(KEYS[3])
if seen == 'back' or seen == 'cancelled' then
  return 2
end
need({
  {'INCRBY on the semaphore', 'incrby', KEYS[1], ARGV[1]},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[2], '0'},
  once_need(KEYS[3]),
})
if seen ~= 'taken' then
  once_note(KEYS[3], 'cancelled', ttl)
  return 0
end
local have, refused = number_at_key()
if refused then
  return refused
end
local now = redis.call('incrby', KEYS[1], ARGV[1])
once_note(KEYS[3], 'back', ttl)
redis.call('publish', KEYS[2], now)
return 1
