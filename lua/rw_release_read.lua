-- rw_release_read.lua: give back one read hold of a read-write lock; when no hold
-- is left at all, delete the lock and wake one waiter (a writer).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the read-write channel, redisson_rwlock:{<name>}
-- KEYS[3]  the release latch, redisson_unlock_latch:{<name>}:<request id>
-- KEYS[4]  this reader's hold timeout prefix, {<name>}:<owner field>:rwlock_timeout
-- KEYS[5]  the name's hash tag, {<name>}: any reader's timeout prefix is
--          '<tag>:<owner field>:rwlock_timeout'
-- ARGV[1]  owner field
-- ARGV[2]  latch lifetime in whole milliseconds, >= 1
-- ARGV[3]  the message to publish when the lock frees ("0": wake one waiter)
--
-- Returns {left, published}: left is the caller's remaining read holds (-1 when
-- it held none: nothing is changed), published is 1 when the lock was deleted and
-- the message published, else 0.
--
-- The highest-numbered timeout key of the caller goes with the hold (holds are
-- counted, not named). The hash's TTL is then set to the longest remaining read
-- hold's, so that readers that crashed stop holding the lock once their own holds
-- lapse; in write mode (the writer's own read holds) it is left alone, as the
-- writer's lease governs it. When no hold is left alive the hash is deleted. The
-- latch makes a retried release return the first outcome. The first write is DEL,
-- never refused when Redis is out of memory, so a release works even then. Every
-- read (the other readers' hold timeouts included) comes before it, and every
-- command after it is asked for before it (ACL).
local latch_ttl = tonumber(ARGV[2])
if latch_ttl == nil or latch_ttl < 1 or latch_ttl ~= math.floor(latch_ttl) then
  return redis.error_reply('ERR lockwarden: latch lifetime must be a whole number of milliseconds >= 1')
end
if ARGV[1] == nil or ARGV[1] == '' then
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
  local left = tonumber(run('HGET on the lock', 'hget', KEYS[1], ARGV[1]))
  if left ~= nil and left > 0 then
    return {left, 0}
  end
  return {1, 0}
end

local mode = run('HGET on the lock', 'hget', KEYS[1], 'mode')
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if (mode ~= 'read' and mode ~= 'write') or holds == nil or holds < 1 then
  return {-1, 0}
end
local left = holds - 1

-- The writes that give the hold back, and the latch.
local give_back = {
  {'DEL on the read hold timeout', 'del', KEYS[4] .. ':' .. holds},
  {'SET on the release latch', 'set', KEYS[3], '1', 'px', ARGV[2]},
}
if left > 0 then
  give_back[3] = {'HINCRBY on the lock', 'hincrby', KEYS[1], ARGV[1], '-1'}
else
  give_back[3] = {'HDEL on the lock', 'hdel', KEYS[1], ARGV[1]}
end

-- The writer's own read holds: the writer's lease governs the hash.
local longest = -2
if mode == 'read' then
  -- The longest remaining read hold, over every reader, read before any write
  -- (the caller's hold number `holds` is about to go, so it counts `left`).
  for _, field in ipairs(run('HKEYS on the lock', 'hkeys', KEYS[1])) do
    if field ~= 'mode' then
      local n = tonumber(redis.call('hget', KEYS[1], field))
      if field == ARGV[1] then
        n = left
      end
      if n ~= nil then
        for i = n, 1, -1 do
          local key = KEYS[5] .. ':' .. field .. ':rwlock_timeout:' .. i
          longest = math.max(longest, run('PTTL on a read hold timeout', 'pttl', key))
        end
      end
    end
  end
  if longest > 0 then
    give_back[4] = {'PEXPIRE on the lock', 'pexpire', KEYS[1], tostring(longest)}
  else
    give_back[4] = {'DEL on the lock', 'del', KEYS[1]}
    give_back[5] = {'PUBLISH on the read-write channel', 'publish', KEYS[2], ARGV[3]}
  end
end
need(give_back)

redis.call('del', KEYS[4] .. ':' .. holds)
if left > 0 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
else
  redis.call('hdel', KEYS[1], ARGV[1])
end

if mode == 'write' then
  redis.call('set', KEYS[3], left > 0 and '0' or '1', 'px', latch_ttl)
  return {left, 0}
end

if longest > 0 then
  redis.call('pexpire', KEYS[1], longest)
  redis.call('set', KEYS[3], left > 0 and '0' or '1', 'px', latch_ttl)
  return {left, 0}
end

-- No read hold is alive (the caller's was the last, the others lapsed): free it.
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[3])
redis.call('set', KEYS[3], '1', 'px', latch_ttl)
return {0, 1}
