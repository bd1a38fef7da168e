-- expirable_release.lua: give back permits of a permit-expirable semaphore by id.
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  its permits, {<name>}:timeout
-- KEYS[3]  its channel, redisson_sc:{<name>}
-- KEYS[4]  (an undo only) the waiter's op marker (once_prelude.lua)
-- ARGV[1]  the op marker's lifetime in ms, or 0 for a plain release (no KEYS[4])
-- ARGV[2..] the permit ids, 32 hex digits each
--
-- Returns how many of them were still taken (and are now given back). An id not
-- in the set expired and was reclaimed (or was given back before): it counts
-- nothing, so a permit is never returned twice. The new available number is
-- published when any came back. An undo (a waiter that left after a lost reply,
-- or whose grant found nobody) also marks its op id, so that a copy of its take
-- that runs later takes nothing ('cancelled' unless a copy took them already).
-- The writes asked for before the first (ACL, acl_prelude.lua): permits back
-- in the count but not announced would fail the call after it changed Redis.
local undo = ARGV[1] ~= '0'
local checks = {
  {'ZREM on the permits', 'zrem', KEYS[2], 'x'},
  {'INCRBY on the semaphore', 'incrby', KEYS[1], '1'},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[3], '0'},
}
local ttl
if undo then
  ttl = once_ttl(1)
  checks[#checks + 1] = once_need(KEYS[4])
end
need(checks)
local back = 0
for i = 2, #ARGV do
  local id = ARGV[i]:gsub('..', function(h) return string.char(tonumber(h, 16)) end)
  back = back + redis.call('zrem', KEYS[2], id)
end
if back > 0 then
  local value = redis.call('incrby', KEYS[1], back)
  redis.call('publish', KEYS[3], value)
end
if undo and not once_seen(KEYS[4]) then
  once_note(KEYS[4], 'cancelled', ttl)
end
return back
