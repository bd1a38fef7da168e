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
-- A PUBLISH goes only to a new head, so only when the queue had one.
if #ARGV < 1 then
  return redis.error_reply('ERR lockwarden: leave needs at least one owner field')
end
-- ACL (Redis 7+), as in fair_prelude.lua (this script runs without it): the reads
-- run with redis.pcall and a denial is named; the commands after the first write
-- (LREM) are asked for before it. Nothing is written before that.
local acl = redis.acl_check_cmd
local function refused(err, what, ...)
  if acl and not acl(...) then
    return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. what)
  end
  return err
end

local names = {'the lock', 'the queue', 'the deadlines'}
for i, want in ipairs({'hash', 'list', 'zset'}) do
  local kind = redis.pcall('type', KEYS[i])
  if kind.err then
    return refused(kind, 'TYPE on ' .. names[i], 'type', KEYS[i])
  end
  kind = kind.ok
  if kind ~= 'none' and kind ~= want then
    return redis.error_reply('WRONGTYPE lockwarden: ' .. KEYS[i] .. ' is a ' .. kind .. ', not a ' .. want)
  end
end

local head_before = redis.pcall('lindex', KEYS[2], 0)
if type(head_before) == 'table' then
  return refused(head_before, 'LINDEX on the queue', 'lindex', KEYS[2], 0)
end
-- Whether the lock is free, read before the writes (which do not change it).
local free = redis.pcall('exists', KEYS[1])
if type(free) == 'table' then
  return refused(free, 'EXISTS on the lock', 'exists', KEYS[1])
end
free = free == 0
if acl then
  local denied = (not acl('lrem', KEYS[2], '0', ARGV[1]) and 'LREM on the queue')
    or (not acl('zrem', KEYS[3], ARGV[1]) and 'ZREM on the deadlines')
    or (free and head_before and not acl('publish', KEYS[4] .. ':' .. head_before, '0') and 'PUBLISH on a waiter channel')
  if denied then
    return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. denied)
  end
end

local left = 0
for i = 1, #ARGV do
  redis.call('lrem', KEYS[2], 0, ARGV[i])
  left = left + redis.call('zrem', KEYS[3], ARGV[i])
end
local head = redis.call('lindex', KEYS[2], 0)
if head and head ~= head_before and free then
  redis.call('publish', KEYS[4] .. ':' .. head, '0')
end
return left
