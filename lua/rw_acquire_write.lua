-- rw_acquire_write.lua: take the write lock of a read-write lock, or re-enter it.
--
-- KEYS[1]  the lock hash (the lock name itself)
-- KEYS[2]  the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1]  lease in whole milliseconds, >= 1
-- ARGV[2]  the writer field, "<client id>:<owner number>:write"
-- ARGV[3]  the same owner's reader field, "<client id>:<owner number>"
-- ARGV[4]  lifetime of the token counter in whole milliseconds, >= 1
--
-- Returns {1, token, holds} when the caller now holds the write lock (holds is its
-- write hold count), {0, pttl} when others hold the lock, or {-1} when the caller
-- holds read holds and not the write lock: waiting for the write lock would wait
-- for itself (an upgrade deadlocks), so it is refused, not queued.
--
-- Arguments and the key's type are checked, and every command after the first
-- write asked for (ACL), before the first write; the hash gets its TTL before the
-- token counter is touched.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease ~= math.floor(lease) then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if ARGV[2] == nil or ARGV[2] == '' or ARGV[3] == nil or ARGV[3] == '' then
  return redis.error_reply('ERR lockwarden: empty owner field')
end
if ARGV[4] == nil or #ARGV[4] > 15 or not string.find(ARGV[4], '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: token lifetime must be a whole number of milliseconds >= 1')
end
-- ACL: `acl`, `run` and `need` come from acl_prelude.lua, put in front of this
-- script when it is built (src/wire/rw.rs).

local kind = run('TYPE on the lock', 'type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end

local mode = run('HGET on the lock', 'hget', KEYS[1], 'mode')
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
  return redis.error_reply('ERR lockwarden: not a read-write lock (mode ' .. tostring(mode) .. ')')
end
local writer = mode == 'write' and run('HEXISTS on the lock', 'hexists', KEYS[1], ARGV[2]) == 1
if not writer and mode ~= false and run('HEXISTS on the lock', 'hexists', KEYS[1], ARGV[3]) == 1 then
  return {-1}
end
-- Read before the first write (HSET and HINCRBY leave the TTL as it is).
local pttl = run('PTTL on the lock', 'pttl', KEYS[1])
if kind == 'hash' and not writer then
  return {0, pttl}
end
local t = run('TIME', 'time')
local writes = {
  {'HINCRBY on the lock', 'hincrby', KEYS[1], ARGV[2], '1'},
  {'PEXPIRE on the lock', 'pexpire', KEYS[1], ARGV[1]},
  {'INCR on the token counter', 'incr', KEYS[2]},
  {'SET on the token counter', 'set', KEYS[2], '1', 'px', ARGV[4]},
  {'PEXPIRE on the token counter', 'pexpire', KEYS[2], ARGV[4]},
  -- The release's PUBLISH (the channel: KEYS[2] with the read-write prefix in
  -- place of the token counter's 20 bytes): without it the lock would stay held
  -- for a whole lease after its release was refused.
  {'PUBLISH on the read-write channel', 'publish', 'redisson_rwlock:' .. string.sub(KEYS[2], 21), '0'},
}
if mode == false then
  writes[#writes + 1] = {'HSET on the lock', 'hset', KEYS[1], 'mode', 'write'}
end
need(writes)

if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
end
local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], math.max(pttl, lease))
local now_us = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
-- Never below the server clock in microseconds, and the counter expires after
-- a long idle time: see lua/token_prelude.lua.
local token = redis.call('incr', KEYS[2])
if token <= tonumber(now_us) then
  token = tonumber(now_us)
  redis.call('set', KEYS[2], now_us, 'px', ARGV[4])
else
  redis.call('pexpire', KEYS[2], ARGV[4])
end
return {1, token, holds}
