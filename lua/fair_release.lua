-- fair_release.lua: give back one hold of a fair lock; at zero, delete it and tell
-- the waiter at the head of the queue, on that waiter's own channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue, redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines, redisson_lock_timeout:{<name>}
-- KEYS[4]  the release latch, redisson_unlock_latch:{<name>}:<request id>
-- KEYS[5]  the unlock channel, redisson_lock__channel:{<name>}; the head's own
--          channel is this followed by ':<owner field>'
-- ARGV[1]  lease in whole milliseconds, >= 1, set again when holds remain
-- ARGV[2]  owner field
-- ARGV[3]  latch lifetime in whole milliseconds, >= 1
-- ARGV[4]  the message to publish to the head ("0": you may take the lock)
--
-- Returns the caller's remaining hold count: 0 when the lock was freed (and the
-- head of the queue, if any, told), > 0 when the caller still holds it, -1 when
-- the caller does not hold it (nothing is changed then, beyond dropping lapsed
-- waiters from the head of the queue).
--
-- As in release.lua: the latch makes a retried release return the first outcome;
-- every argument and key type is checked, and every command after the first write
-- asked for (ACL, Redis 7+: see fair_prelude.lua), before the first write; and the first
-- write is never one that Redis refuses when out of memory (LPOP, ZREM, PEXPIRE,
-- DEL), so a release works even then.
--
-- Runs with lua/fair_prelude.lua in front (run, need, both, fair_type_error,
-- server_ms, drop_lapsed).
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
local type_error = fair_type_error()
if type_error then
  return type_error
end

local done = run('GET on the release latch', 'get', KEYS[4])
if done then
  if done == '1' then
    return 0
  end
  local left = tonumber(run('HGET on the lock', 'hget', KEYS[1], ARGV[2]))
  if left ~= nil and left > 0 then
    return left
  end
  return 1
end

local holds = tonumber(run('HGET on the lock', 'hget', KEYS[1], ARGV[2]))
if run('HEXISTS on the lock', 'hexists', KEYS[1], ARGV[2]) == 1 and holds == nil then
  return redis.error_reply('ERR lockwarden: hold count is not a number')
end

-- ACL (see fair_prelude.lua): the writes of each path, asked for before the first.
local keep_needs = {
  {'PEXPIRE on the lock', 'pexpire', KEYS[1], ARGV[1]},
  {'HINCRBY on the lock', 'hincrby', KEYS[1], ARGV[2], '-1'},
  {'SET on the release latch', 'set', KEYS[4], '0', 'px', ARGV[3]},
}
local free_needs = {
  {'DEL on the lock', 'del', KEYS[1]},
  {'SET on the release latch', 'set', KEYS[4], '1', 'px', ARGV[3]},
}

-- Lapsed waiters leave the head of the queue (server clock). After a pop, every
-- command of the caller's path comes after the first write.
local now = server_ms()
local popped = drop_lapsed(now, function(first)
  local told = {'PUBLISH on a waiter channel', 'publish', KEYS[5] .. ':' .. first, ARGV[4]}
  if holds == nil then
    return {{'EXISTS on the lock', 'exists', KEYS[1]}, told}
  elseif holds > 1 then
    return keep_needs
  end
  return both(free_needs, {told})
end)

local result
if holds == nil then
  result = -1
elseif holds > 1 then
  need(keep_needs)
  redis.call('pexpire', KEYS[1], lease)
  result = redis.call('hincrby', KEYS[1], ARGV[2], -1)
  redis.call('set', KEYS[4], '0', 'px', latch_ttl)
  return result
else
  -- The head, read before the DEL (which does not change it; LINDEX ran in
  -- drop_lapsed, so it is allowed), to ask for its PUBLISH first.
  local head = redis.call('lindex', KEYS[2], 0)
  need(free_needs)
  if head then
    need({{'PUBLISH on a waiter channel', 'publish', KEYS[5] .. ':' .. head, ARGV[4]}})
  end
  redis.call('del', KEYS[1])
  redis.call('set', KEYS[4], '1', 'px', latch_ttl)
  result = 0
end

-- The lock is free now (released here, or found free after dropping lapsed
-- waiters): the head, and only the head, is told.
if result == 0 or (popped > 0 and redis.call('exists', KEYS[1]) == 0) then
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    redis.call('publish', KEYS[5] .. ':' .. head, ARGV[4])
  end
end
return result
