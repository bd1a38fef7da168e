-- rw_release_write.lua: give back one write hold of a read-write lock; at zero,
-- delete the lock (or leave it in read mode for the writer's own read holds) and
-- wake all waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the read-write channel, redisson_rwlock:{<name>}
-- KEYS[3]  the release latch, redisson_unlock_latch:{<name>}:<request id>
-- ARGV[1]  lease in whole milliseconds, >= 1, set again when holds remain
-- ARGV[2]  the writer field, "<owner field>:write"
-- ARGV[3]  latch lifetime in whole milliseconds, >= 1
-- ARGV[4]  the message to publish when the write lock frees ("1": wake all)
--
-- Returns {left, published}: left is the caller's remaining write holds (-1 when it
-- does not hold the write lock: nothing is changed), published is 1 when the
-- message was published.
--
-- When the writer still holds read holds (it downgraded), the mode becomes `read`
-- and the lock stays with those holds; the message is published then too, since
-- other readers may now join (Redisson publishes only when the hash is deleted;
-- an extra wake is harmless, a missing one leaves readers asleep). The first
-- write is PEXPIRE or HDEL, never refused when Redis is out of memory; every read
-- comes before it and every command after it is asked for before it (ACL).
local lease = tonumber(ARGV[1])
local latch_ttl = tonumber(ARGV[3])
if lease == nil or lease < 1 or lease ~= math.floor(lease) then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if latch_ttl == nil or latch_ttl < 1 or latch_ttl ~= math.floor(latch_ttl) then
  return redis.error_reply('ERR lockwarden: latch lifetime must be a whole number of milliseconds >= 1')
end
if ARGV[2] == nil or ARGV[2] == '' then
  return redis.error_reply('ERR lockwarden: empty owner field')
end
-- ACL: `acl`, `run` and `need` come from acl_prelude.lua, put in front of this
-- script when it is built (src/wire/rw.rs).

local kind = run('TYPE on the lock', 'type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end

local done = run('GET on the release latch', 'get', KEYS[3])
if done then
  if done == '1' then
    return {0, 0}
  end
  local left = tonumber(run('HGET on the lock', 'hget', KEYS[1], ARGV[2]))
  if left ~= nil and left > 0 then
    return {left, 0}
  end
  return {1, 0}
end

local holds = tonumber(run('HGET on the lock', 'hget', KEYS[1], ARGV[2]))
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or holds == nil or holds < 1 then
  return {-1, 0}
end

if holds > 1 then
  local pttl = run('PTTL on the lock', 'pttl', KEYS[1])
  need({
    {'PEXPIRE on the lock', 'pexpire', KEYS[1], ARGV[1]},
    {'HINCRBY on the lock', 'hincrby', KEYS[1], ARGV[2], '-1'},
    {'SET on the release latch', 'set', KEYS[3], '0', 'px', ARGV[3]},
  })
  redis.call('pexpire', KEYS[1], math.max(pttl, lease))
  local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
  redis.call('set', KEYS[3], '0', 'px', latch_ttl)
  return {left, 0}
end

-- Counted before the HDEL, so one more than after it: `mode` and the writer's
-- field alone (<= 2) mean no read hold remains.
local fields = run('HLEN on the lock', 'hlen', KEYS[1])
local writes = {
  {'HDEL on the lock', 'hdel', KEYS[1], ARGV[2]},
  {'PUBLISH on the read-write channel', 'publish', KEYS[2], ARGV[4]},
  {'SET on the release latch', 'set', KEYS[3], '1', 'px', ARGV[3]},
}
if fields <= 2 then
  writes[4] = {'DEL on the lock', 'del', KEYS[1]}
else
  writes[4] = {'HSET on the lock', 'hset', KEYS[1], 'mode', 'read'}
end
need(writes)

redis.call('hdel', KEYS[1], ARGV[2])
if fields <= 2 then
  redis.call('del', KEYS[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('publish', KEYS[2], ARGV[4])
redis.call('set', KEYS[3], '1', 'px', latch_ttl)
return {0, 1}
