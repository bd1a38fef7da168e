-- expirable_release.lua: give back permits of a permit-expirable semaphore by id.
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  its permits, {<name>}:timeout
-- KEYS[3]  its channel, redisson_sc:{<name>}
-- KEYS[4]  the op marker of this release or undo (once_prelude.lua)
-- ARGV[1]  the op marker's lifetime in ms
-- ARGV[2]  'release' (a guard gives its permits back) or 'undo' (a waiter that
--          left after a lost reply, or whose grant found nobody)
-- ARGV[3..] the permit ids, 32 hex digits each
--
-- Returns how many of them were still taken (and are now given back). An id not
-- in the set expired and was reclaimed (or was given back before): it counts
-- nothing, so a permit is never returned twice. The new available number is
-- published when any came back. A release records its answer under its op id,
-- so a retry after a lost reply answers what the first copy gave back (and does
-- not read as permits lost). An undo marks the waiter's op id instead, so that a
-- copy of its take that runs later takes nothing ('cancelled' unless a copy
-- took them already).
-- The writes asked for before the first (ACL, acl_prelude.lua): permits back
-- in the count but not announced would fail the call after it changed Redis.
local ttl = once_ttl(1)
local undo = ARGV[2] == 'undo'
if not undo and ARGV[2] ~= 'release' then
  return redis.error_reply('ERR lockwarden: mode must be release or undo')
end
local seen = once_seen(KEYS[4])
if seen and not undo then
  return tonumber(seen)
end
need({
  {'ZREM on the permits', 'zrem', KEYS[2], 'x'},
  {'INCRBY on the semaphore', 'incrby', KEYS[1], '1'},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[3], '0'},
  once_need(KEYS[4]),
})
local back = 0
for i = 3, #ARGV do
  local id = ARGV[i]:gsub('..', function(h) return string.char(tonumber(h, 16)) end)
  back = back + redis.call('zrem', KEYS[2], id)
end
if back > 0 then
  local value = redis.call('incrby', KEYS[1], back)
  redis.call('publish', KEYS[3], value)
end
if not undo then
  once_note(KEYS[4], tostring(back), ttl)
elseif not seen then
  once_note(KEYS[4], 'cancelled', ttl)
end
return back
