-- sem_release.lua: give permits back to a semaphore (or add new ones) and tell its
-- waiters how many are available now.
--
-- KEYS[1]  the semaphore key (a string: the available permits)
-- KEYS[2]  its channel, redisson_sc:{<name>}
-- KEYS[3]  the op marker of this give-back (once_prelude.lua)
-- ARGV[1]  permits to add, >= 1
-- ARGV[2]  the most permits the key may hold (Redisson reads it as a Java int)
-- ARGV[3]  the op marker's lifetime in ms
--
-- Returns {1, available, created} after adding (created: 1 when the key was
-- absent, so this call made the semaphore, else 0), or {-1, available} when the
-- sum would pass ARGV[2] (nothing is written or published then). The message is
-- the new number of available permits, as Redisson publishes it. A copy of a
-- give-back that already ran adds nothing and answers {1, available, 0}.
local ttl = once_ttl(3)
local have, refused, absent = number_at_key()
if refused then
  return refused
end
if once_seen(KEYS[3]) then
  return {1, have, 0}
end
local now = have + tonumber(ARGV[1])
if now > tonumber(ARGV[2]) then
  return {-1, have}
end
-- Both writes are asked for before the first (ACL): a denied PUBLISH after the
-- INCRBY would fail the call with the permits already back, and a caller that
-- retried it would give them back twice.
need({
  {'INCRBY on the semaphore', 'incrby', KEYS[1], ARGV[1]},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[2], '0'},
  once_need(KEYS[3]),
})
-- INCRBY rather than SET: a TTL a Java user put on the semaphore stays.
redis.call('incrby', KEYS[1], ARGV[1])
once_note(KEYS[3], 'given', ttl)
redis.call('publish', KEYS[2], now)
return {1, now, absent and 1 or 0}
