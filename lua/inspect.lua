-- inspect.lua: read a lock's holders and remaining TTL in one consistent look.
--
-- KEYS[1]  the lock hash
--
-- Returns {-2} when there is no such key, else {pttl, {field1, value1, field2, ...}}
-- with pttl as PTTL reports it (-1: no expiry). A key of another type is an error.
-- Read-only: it writes nothing.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return {-2}
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end
return {redis.call('pttl', KEYS[1]), redis.call('hgetall', KEYS[1])}
