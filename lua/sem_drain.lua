-- sem_drain.lua: take every available permit of a semaphore at once.
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  the drain's op marker (once_prelude.lua)
-- ARGV[1]  the op marker's lifetime in ms
--
-- Returns how many were taken (0 when the key is absent, which stays absent). A
-- drain retried after a lost reply answers what its first copy took and takes
-- nothing more (permits given back meanwhile stay).
local ttl = once_ttl(1)
local seen = once_seen(KEYS[2])
if seen then
  return tonumber(seen)
end
local have = redis.call('get', KEYS[1])
if not have then
  return 0
end
if tonumber(have) == nil then
  return not_a_number(have)
end
redis.call('set', KEYS[1], 0)
once_note(KEYS[2], have, ttl)
return tonumber(have)
