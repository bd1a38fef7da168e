-- sem_acquire.lua: take permits of a semaphore if enough are available.
--
-- Redisson's RSemaphore layout: the semaphore is a string key, the name itself,
-- holding the number of available permits (absent: none yet, the same as 0).
--
-- KEYS[1]  the semaphore key
-- ARGV[1]  permits to take, >= 1
--
-- Returns {1, left} when taken (left: what is available now), or {0, available}
-- when fewer than ARGV[1] are available (nothing is changed then).
-- A value that is not a number is refused with NOTNUMBER "<length>:<value> <key>"
-- (its first 64 bytes), as Redisson's own scripts fail there, rather than read as
-- zero: a waiter would wait on it forever.
local function not_a_number(raw)
  local v = string.sub(raw, 1, 64)
  return redis.error_reply('NOTNUMBER ' .. #v .. ':' .. v .. ' ' .. KEYS[1])
end
local raw = redis.call('get', KEYS[1])
local have = tonumber(raw or '0')
if have == nil then
  return not_a_number(raw)
end
local want = tonumber(ARGV[1])
if have >= want then
  return {1, redis.call('decrby', KEYS[1], want)}
end
return {0, have}
