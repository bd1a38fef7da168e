-- number_prelude.lua: put in front of the synchronizer scripts that read the
-- number at KEYS[1] (a semaphore's permits, a latch's count); Redis scripts
-- cannot include one another.
--
-- A value that is not a number is refused with NOTNUMBER "<length>:<value> <key>"
-- (its first 64 bytes), as Redisson's own scripts fail there, rather than read as
-- zero: a waiter would wait on it forever.
local function not_a_number(raw)
  local v = string.sub(raw, 1, 64)
  return redis.error_reply('NOTNUMBER ' .. #v .. ':' .. v .. ' ' .. KEYS[1])
end

-- The number at KEYS[1] (0 when the key is absent), or nil and the error to
-- answer when it holds something else; third, whether the key is absent.
local function number_at_key()
  local raw = redis.call('get', KEYS[1])
  local n = tonumber(raw or '0')
  if n == nil then
    return nil, not_a_number(raw)
  end
  return n, nil, not raw
end
