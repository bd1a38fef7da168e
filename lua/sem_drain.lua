-- sem_drain.lua: take every available permit of a semaphore at once.
--
-- KEYS[1]  the semaphore key
--
-- Returns how many were taken (0 when the key is absent, which stays absent).
-- A value that is not a number is refused with NOTNUMBER "<length>:<value> <key>"
-- (its first 64 bytes), as Redisson's own scripts fail there, rather than read as
-- zero: a waiter would wait on it forever.
local function not_a_number(raw)
  local v = string.sub(raw, 1, 64)
  return redis.error_reply('NOTNUMBER ' .. #v .. ':' .. v .. ' ' .. KEYS[1])
end
local have = redis.call('get', KEYS[1])
if not have then
  return 0
end
if tonumber(have) == nil then
  return not_a_number(have)
end
redis.call('set', KEYS[1], 0)
return tonumber(have)
