-- fair_leave.lua: waiters that gave up leave a fair lock's queue.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines, redisson_lock_timeout:{<name>}
-- KEYS[4]  the unlock channel, redisson_lock__channel:{<name>}
-- ARGV[1..] the owner fields that leave
--
-- Returns how many of them had a place. When a leaver was at the head of the queue
-- and the lock is free, the new head is told on its own channel (it would
-- otherwise wait for a release that already happened).
--
-- Only LREM, ZREM and PUBLISH: nothing here is refused when Redis is out of memory.
if #ARGV < 1 then
  return redis.error_reply('ERR lockwarden: leave needs at least one owner field')
end
for i, want in ipairs({'hash', 'list', 'zset'}) do
  local kind = redis.call('type', KEYS[i]).ok
  if kind ~= 'none' and kind ~= want then
    return redis.error_reply('WRONGTYPE lockwarden: ' .. KEYS[i] .. ' is a ' .. kind .. ', not a ' .. want)
  end
end

local head_before = redis.call('lindex', KEYS[2], 0)
local left = 0
for i = 1, #ARGV do
  redis.call('lrem', KEYS[2], 0, ARGV[i])
  left = left + redis.call('zrem', KEYS[3], ARGV[i])
end
local head = redis.call('lindex', KEYS[2], 0)
if head and head ~= head_before and redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', KEYS[4] .. ':' .. head, '0')
end
return left
