-- fair_sem_leave.lua: waiters that gave up (deadline, dropped caller, shutdown)
-- leave a fair semaphore's queue at once, rather than holding it up until
-- their place lapses.
--
-- KEYS[1..4] as in fair_sem_prelude.lua (semaphore, queue, places, channels)
-- ARGV[1..] the waiter ids that leave
--
-- Returns how many of them had a place. When the head changed, the new head is
-- told on its channel: the permits the leaver waited for may be there already.
-- Only LREM, ZREM and PUBLISH: nothing here is refused out of memory.
if #ARGV < 1 then
  return redis.error_reply('ERR lockwarden: leave needs at least one waiter id')
end
local type_error = fair_sem_type_error()
if type_error then
  return type_error
end
local head_before = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
local needs = {}
for i = 1, #ARGV do
  needs[#needs + 1] = {'LREM on the queue', 'lrem', KEYS[2], '0', ARGV[i]}
  needs[#needs + 1] = {'ZREM on the places', 'zrem', KEYS[3], ARGV[i]}
end
needs[#needs + 1] = {'PUBLISH on a waiter channel', 'publish', waiter_channel('x'), '0'}
need(needs)

local left = 0
for i = 1, #ARGV do
  redis.call('lrem', KEYS[2], 0, ARGV[i])
  left = left + redis.call('zrem', KEYS[3], ARGV[i])
end
local head = redis.call('lindex', KEYS[2], 0)
if head and head ~= head_before then
  redis.call('publish', waiter_channel(head), '0')
end
return left
