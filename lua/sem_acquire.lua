-- sem_acquire.lua: take permits of a semaphore if enough are available.
--
-- Redisson's RSemaphore layout: the semaphore is a string key, the name itself,
-- holding the number of available permits (absent: none yet, the same as 0).
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  its channel, redisson_sc:{<name>}
-- KEYS[3]  the waiter's op marker (once_prelude.lua)
-- ARGV[1]  permits to take, >= 1
-- ARGV[2]  the op marker's lifetime in ms
--
-- Returns {1, left} when taken (left: what is available now), or {0, available,
-- missing} when fewer than ARGV[1] are available (nothing is changed then);
-- missing is 1 when the key does not exist at all (never set, deleted, or lost
-- with Redis's data: no release will ever come), 0 when it holds too few.
--
-- Plain permits have no lease: one taken by a user that may not give it back
-- (INCRBY, and the PUBLISH that wakes the waiters) would be gone for good. So the
-- taker is asked for both before the DECRBY (acl_prelude.lua's `need`).
--
-- A waiter keeps its op id across its attempts: an attempt whose reply was lost
-- is asked again under the same id, and learns from the marker that the first
-- copy took its permits ({1, available}, nothing taken twice). A waiter that
-- left undoes the id (sem_undo.lua); a copy that runs after that takes nothing.
local ttl = once_ttl(2)
local have, refused, absent = number_at_key()
if refused then
  return refused
end
local seen = once_seen(KEYS[3])
if seen == 'taken' then
  return {1, have}
elseif seen then
  return {0, have, 0}
end
local want = tonumber(ARGV[1])
if have >= want then
  need({
    {'DECRBY on the semaphore', 'decrby', KEYS[1], ARGV[1]},
    {'INCRBY on the semaphore', 'incrby', KEYS[1], ARGV[1]},
    {'PUBLISH on the semaphore channel', 'publish', KEYS[2], '0'},
    once_need(KEYS[3]),
  })
  local left = redis.call('decrby', KEYS[1], want)
  once_note(KEYS[3], 'taken', ttl)
  return {1, left}
end
if absent then
  return {0, have, 1}
end
return {0, have, 0}
