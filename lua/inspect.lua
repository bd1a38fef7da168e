-- inspect.lua: read a lock's holders, remaining TTL and fair queue in one
-- consistent look.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fair-lock queue, redisson_lock_queue:{<name>}
--
-- Returns {pttl, {field1, value1, field2, ...}, {queued owner field, ...}} with pttl
-- as PTTL reports it (-2: no such key, -1: no expiry); the queue is head first and
-- empty when there is none (or KEYS[2] is not a list). A lock key of another type
-- than hash is an error. Read-only: it writes nothing.
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end
local queue = {}
if redis.call('type', KEYS[2]).ok == 'list' then
  queue = redis.call('lrange', KEYS[2], 0, -1)
end
if kind == 'none' then
  return {-2, {}, queue}
end
return {redis.call('pttl', KEYS[1]), redis.call('hgetall', KEYS[1]), queue}
