-- rw_acquire_read.lua: take a read hold of a read-write lock: the first, another
-- reader's alongside, a re-entry, or the writer's own (a downgrade).
--
-- KEYS[1]  the lock hash (the lock name itself): `mode` -> read/write, owner
--          fields -> hold counts
-- KEYS[2]  the fencing token counter, redisson_lock_token:{<name>}
-- KEYS[3]  this reader's hold timeout prefix, {<name>}:<owner field>:rwlock_timeout;
--          hold n lives at '<prefix>:<n>'
-- ARGV[1]  lease in whole milliseconds, >= 1
-- ARGV[2]  owner field, "<client id>:<owner number>"
-- ARGV[3]  the same owner's writer field, "<owner field>:write"
-- ARGV[4]  lifetime of the token counter in whole milliseconds, >= 1
--
-- Returns {1, token, holds} when the caller now holds one more read hold (holds is
-- its read hold count), or {0, pttl} when another owner holds the write lock.
--
-- Each read hold gets its own timeout key with the lease, so a crashed reader's
-- holds lapse on their own; the hash's TTL is kept at the longest of them (never
-- shortened here: other holders may need it). Arguments and the key's type are
-- checked, and every command after the first write asked for (ACL), before the
-- first write; the hash gets its TTL before the token counter (the only command
-- after it that can fail, out of memory) is touched.
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
if mode == false and kind == 'hash' then
  -- An exclusive (or fair) lock is held under this name: busy.
  return {0, run('PTTL on the lock', 'pttl', KEYS[1])}
end
if mode == 'write' and run('HEXISTS on the lock', 'hexists', KEYS[1], ARGV[3]) == 0 then
  return {0, run('PTTL on the lock', 'pttl', KEYS[1])}
end

-- Read before the first write (the writes before PEXPIRE leave the TTL as it is:
-- -2 or -1, both below the lease, or the hash's own).
local pttl = run('PTTL on the lock', 'pttl', KEYS[1])
local t = run('TIME', 'time')
-- The new hold's timeout key is '<prefix>:<holds>', asked for as '<prefix>:1':
-- an ACL key pattern that matches one of them matches all (they differ only at
-- the end).
local writes = {
  {'HINCRBY on the lock', 'hincrby', KEYS[1], ARGV[2], '1'},
  {'SET on the read hold timeout', 'set', KEYS[3] .. ':1', '1', 'px', ARGV[1]},
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
  writes[#writes + 1] = {'HSET on the lock', 'hset', KEYS[1], 'mode', 'read'}
end
need(writes)

if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
end
local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('set', KEYS[3] .. ':' .. holds, 1, 'px', lease)
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
