-- latch_count_down.lua: take one from a count-down latch's count; at zero, delete
-- the key and tell every waiter.
--
-- KEYS[1]  the latch key
-- KEYS[2]  its channel
-- KEYS[3]  the count-down's op marker (once_prelude.lua)
-- ARGV[1]  the op marker's lifetime in ms
--
-- Returns the count left: 0 when this call opened the latch, -1 when it was
-- open already (it stays open: the key is deleted again and nothing is
-- published). A count-down retried after a lost reply, or a copy that runs
-- late, answers what its first copy answered and counts nothing.
local ttl = once_ttl(1)
local seen = once_seen(KEYS[3])
if seen then
  return tonumber(seen)
end
-- The writes are asked for before the first (ACL, acl_prelude.lua): the count
-- reaching zero without its PUBLISH would leave every waiter asleep until it
-- polls, and the caller with an error after the count moved.
need({
  {'DECR on the latch', 'decr', KEYS[1]},
  {'DEL on the latch', 'del', KEYS[1]},
  {'PUBLISH on the latch channel', 'publish', KEYS[2], '0'},
  once_need(KEYS[3]),
})
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
once_note(KEYS[3], tostring(math.max(left, -1)), ttl)
if left == 0 then
  redis.call('publish', KEYS[2], '0')
end
if left < 0 then
  return -1
end
return left
