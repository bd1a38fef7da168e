-- sem_try_set.lua: give a semaphore its first permits, unless it already has a value.
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  its channel, redisson_sc:{<name>}
-- ARGV[1]  the permits, >= 0
--
-- Returns 1 when set (and the number is published, waking waiters), 0 when the key
-- already existed (nothing changed).
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
-- Both writes asked for first (ACL, acl_prelude.lua): permits set but never
-- announced would leave the waiters asleep until they poll.
need({
  {'SET on the semaphore', 'set', KEYS[1], ARGV[1]},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[2], '0'},
})
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
