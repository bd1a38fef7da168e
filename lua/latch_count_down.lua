-- latch_count_down.lua: take one from a count-down latch's count; at zero, delete
-- the key and tell every waiter.
--
-- KEYS[1]  the latch key
-- KEYS[2]  its channel
--
-- Returns the count left (0 when the latch is open; a latch already open stays
-- open: the key is deleted again and nothing is published).
local left = redis.pcall('decr', KEYS[1])
if type(left) == 'table' then
  -- DECR refuses a value that is not an integer (or a key of another type).
  local raw = redis.pcall('get', KEYS[1])
  if type(raw) == 'string' then
    return not_a_number(raw)
  end
  return left
end
if left <= 0 then
  redis.call('del', KEYS[1])
end
if left == 0 then
  redis.call('publish', KEYS[2], '0')
end
if left < 0 then
  return 0
end
return left
