-- sem_drain.lua: take every available permit of a semaphore at once.
--
-- KEYS[1]  the semaphore key
--
-- Returns how many were taken (0 when the key is absent, which stays absent).
local have = redis.call('get', KEYS[1])
if not have then
  return 0
end
if tonumber(have) == nil then
  return not_a_number(have)
end
redis.call('set', KEYS[1], 0)
return tonumber(have)
