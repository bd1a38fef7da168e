-- force_release.lua: delete a lock whoever holds it, and wake whoever waits for it,
-- whatever its kind.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, redisson_lock__channel:{<name>}
-- KEYS[3]  the read-write channel, redisson_rwlock:{<name>}
-- KEYS[4]  the fair-lock queue, redisson_lock_queue:{<name>}
-- ARGV[1]  the message that wakes one waiter ("0")
-- ARGV[2]  the message that wakes all waiters ("1")
--
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type
-- than hash is not a lock: it is left alone and an error is returned, so an
-- operator's typo cannot delete application data.
--
-- A read-write lock (it has a `mode` field) wakes all of its waiters on its own
-- channel. Any other lock wakes one waiter on the unlock channel and, when a fair
-- queue exists, the waiter at its head on that waiter's own channel. Read holds'
-- timeout keys are left to expire on their own: without the hash they grant nothing.
-- DEL comes first: it is never refused when Redis is out of memory.
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end
local queue = redis.call('type', KEYS[4]).ok
local read_write = redis.call('hexists', KEYS[1], 'mode') == 1
redis.call('del', KEYS[1])
if read_write then
  redis.call('publish', KEYS[3], ARGV[2])
  return 1
end
redis.call('publish', KEYS[2], ARGV[1])
if queue == 'list' then
  local head = redis.call('lindex', KEYS[4], 0)
  if head then
    redis.call('publish', KEYS[2] .. ':' .. head, ARGV[1])
  end
end
return 1
