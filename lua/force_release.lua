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
-- DEL comes first: it is never refused when Redis is out of memory. Every read
-- comes before it, and the PUBLISHes after it are asked for before it (ACL): a
-- denied PUBLISH would otherwise leave the lock deleted with its waiters asleep.
-- ACL (Redis 7+), as in fair_prelude.lua: a command the ACL denies fails a script
-- where it stands, after the writes before it. So the reads and the first write run
-- with redis.pcall (`run`: a denial there has written nothing; the script ends
-- with NOPERM naming it), and the commands after the first write are asked for
-- before it, on the path taken (`need`).
-- (`acl`, `run` and `need` come from acl_prelude.lua, put in front of this
-- script when it is built: src/wire/look.rs.)

local kind = run('TYPE on the lock', 'type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end
local queue = run('TYPE on the queue', 'type', KEYS[4]).ok
local read_write = run('HEXISTS on the lock', 'hexists', KEYS[1], 'mode') == 1
if read_write then
  need({{'PUBLISH on the read-write channel', 'publish', KEYS[3], ARGV[2]}})
  run('DEL on the lock', 'del', KEYS[1])
  redis.call('publish', KEYS[3], ARGV[2])
  return 1
end
-- The head of a fair queue, read before the DEL (which does not change it).
local head = false
if queue == 'list' then
  head = run('LINDEX on the queue', 'lindex', KEYS[4], 0)
end
local later = {{'PUBLISH on the unlock channel', 'publish', KEYS[2], ARGV[1]}}
if head then
  later[2] = {'PUBLISH on a waiter channel', 'publish', KEYS[2] .. ':' .. head, ARGV[1]}
end
need(later)
run('DEL on the lock', 'del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
if head then
  redis.call('publish', KEYS[2] .. ':' .. head, ARGV[1])
end
return 1
