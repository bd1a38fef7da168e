-- rw_renew.lua: extend a read-write lock holder's lease (the watchdog): its read
-- holds' timeout keys and the hash together, or the hash for a writer.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the holder's read hold timeout prefix, {<name>}:<owner field>:rwlock_timeout
--          (ignored for a writer)
-- ARGV[1]  lease in whole milliseconds, >= 1
-- ARGV[2]  the holder's field: "<owner field>" for a reader, "<owner field>:write"
--          for the writer
-- ARGV[3]  'read' or 'write'
--
-- Returns 1 when the holder still holds the lock (its holds now last the lease, and
-- the hash at least as long), 0 when it does not (nothing is changed then).
--
-- The hash's TTL is raised to the lease, never lowered: other readers' holds may
-- last longer. A crashed reader's holds are not touched, so they lapse on their
-- own. Only HGET, PTTL and PEXPIRE are used: renewal keeps working when Redis is
-- out of memory. Reads come before the first write, and the PEXPIREs after it are
-- asked for before it (ACL).
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease ~= math.floor(lease) then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if ARGV[3] ~= 'read' and ARGV[3] ~= 'write' then
  return redis.error_reply('ERR lockwarden: side must be read or write')
end
-- ACL: `acl`, `run` and `need` come from acl_prelude.lua, put in front of this
-- script when it is built (src/wire/rw.rs).

local kind = run('TYPE on the lock', 'type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end
local holds = tonumber(run('HGET on the lock', 'hget', KEYS[1], ARGV[2]))
if holds == nil or holds < 1 then
  return 0
end
local pttl = run('PTTL on the lock', 'pttl', KEYS[1])
if ARGV[3] == 'read' then
  -- The first PEXPIRE is the first write; the others are asked for before it.
  local later = {{'PEXPIRE on the lock', 'pexpire', KEYS[1], ARGV[1]}}
  for i = 2, holds do
    later[i] = {'PEXPIRE on a read hold timeout', 'pexpire', KEYS[2] .. ':' .. i, ARGV[1]}
  end
  need(later)
  run('PEXPIRE on a read hold timeout', 'pexpire', KEYS[2] .. ':1', lease)
  for i = 2, holds do
    redis.call('pexpire', KEYS[2] .. ':' .. i, lease)
  end
  redis.call('pexpire', KEYS[1], math.max(pttl, lease))
  return 1
end
run('PEXPIRE on the lock', 'pexpire', KEYS[1], math.max(pttl, lease))
return 1
