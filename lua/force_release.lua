-- force_release.lua: delete a lock whoever holds it, and wake a waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel
-- ARGV[1]  the message to publish when a lock was deleted ("0": wake one waiter)
--
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type
-- than hash is not a lock: it is left alone and an error is returned, so an
-- operator's typo cannot delete application data.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
