-- transfer.lua: the holder's last release and the next local owner's acquisition in
-- one atomic call, without freeing the lock in between.
--
-- Not a script on its own: src/wire/exclusive.rs puts release.lua and acquire.lua
-- in front of it as the functions op_release and op_acquire (as batch.lua has
-- them), so the hold count, latch, fencing token and ACL rules are theirs. The
-- process that holds a plain lock and has a waiter of its own for it hands it over
-- with this: one round trip instead of a release and an acquisition, and no unlock
-- message, so no other process's waiter wakes up only to find the lock taken again
-- (which cost each of them a failed attempt per handoff). How long a process may
-- keep handing over while others wait is the caller's rule (src/actors/lock/turn.rs);
-- the answer says how many listen on the channel, so it knows whether they do.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel
-- KEYS[3]  the release latch of this request id
-- KEYS[4]  the fencing token counter
-- ARGV[1..5] the release's, as release.lua takes them (lease, owner field, latch
--          lifetime, message, retry flag)
-- ARGV[6]  the new owner's field
-- ARGV[7]  its lease in whole milliseconds
-- ARGV[8]  the token counter's lifetime in whole milliseconds
-- ARGV[9]  "1" to count the subscriptions on the unlock channel (PUBSUB NUMSUB),
--          "0" or absent not to: the caller needs the count only now and then
-- ARGV[10] the new owner's lock-delay in whole milliseconds, "0" or absent for
--          none (acquire.lua's ARGV[5])
-- KEYS[5], KEYS[6], ARGV[11]  the handoff queue, its deadlines and the new
--          owner's place lifetime (acquire.lua's KEYS[3], KEYS[4] and ARGV[6]):
--          a new owner that waited with a place in the handoff queue leaves it
--          with this grant; absent or "0": it had none
--
-- Returns {0, token, listening} when the lock went to the new owner (its fencing
-- token; how many subscriptions listen on the unlock channel, when asked for;
-- {0, token} when not), else what release.lua
-- returned: > 0 holds left (nothing handed over), -1 not held, a plain 0 for a retry
-- answered from the latch (whether the new owner got it is then unknown: the
-- caller reads its hold count), or an error reply.

-- Everything the acquisition needs is checked before the release writes: a
-- refusal after the DEL would leave the lock freed with nobody woken.
local lease, keep = ARGV[7], ARGV[8]
if lease == nil or #lease > 15 or not string.find(lease, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if keep == nil or #keep > 15 or not string.find(keep, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: token lifetime must be a whole number of milliseconds >= 1')
end
if ARGV[6] == nil or ARGV[6] == '' or ARGV[6] == ARGV[2] then
  return redis.error_reply('ERR lockwarden: the new owner field must differ from the old one')
end
local count = ARGV[9] == '1'
if ARGV[9] ~= nil and ARGV[9] ~= '0' and not count then
  return redis.error_reply('ERR lockwarden: count flag must be 0 or 1')
end
local acl = redis.acl_check_cmd
if acl then
  local denied = (not acl('pttl', KEYS[1]) and 'PTTL on the lock')
    or (not acl('hincrby', KEYS[1], ARGV[6], '1') and 'HINCRBY on the lock')
    or (not acl('pexpire', KEYS[1], lease) and 'PEXPIRE on the lock')
    or (not acl('time') and 'TIME')
    or (not acl('set', KEYS[4], '1', 'px', keep, 'get') and 'SET on the token counter')
    or (not acl('publish', KEYS[2], ARGV[4]) and 'PUBLISH on the unlock channel')
    or (count and not acl('pubsub', 'numsub', KEYS[2]) and 'PUBSUB NUMSUB on the unlock channel')
    or (ARGV[10] and ARGV[10] ~= '0' and not acl('hset', KEYS[1], 'lockwarden:delay', '0,0')
      and 'HSET on the lock')
  if denied then
    return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. denied)
  end
end

local released = op_release({KEYS[1], KEYS[2], KEYS[3]},
  {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], '1'})
if type(released) ~= 'table' or released.err or released[1] ~= 0 then
  return released
end
local granted = op_acquire({KEYS[1], KEYS[4], KEYS[5], KEYS[6]},
  {ARGV[7], ARGV[6], ARGV[8], '0', ARGV[10], ARGV[11]})
if granted.err or granted[1] ~= 1 then
  -- Not reached: the hash was just deleted and every right asked for. Should it
  -- happen, the lock is free: say so to those who wait.
  redis.call('publish', KEYS[2], ARGV[4])
  return granted
end
if not count then
  return {0, granted[2]}
end
local listening = redis.call('pubsub', 'numsub', KEYS[2])[2]
return {0, granted[2], listening}
