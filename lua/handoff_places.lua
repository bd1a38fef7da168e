-- handoff_places.lua: keep or give up places in an exclusive lock's handoff queue.
--
-- KEYS[1]  the handoff queue, lockwarden_handoff_queue:{<name>}
-- KEYS[2]  the handoff deadlines, lockwarden_handoff_timeout:{<name>}
-- KEYS[3]  the lock hash (only its PTTL is read, when places are kept)
-- ARGV[1]  how long a kept place lives from now, in whole milliseconds; "0":
--          the fields leave (their list entries are skipped when popped)
-- ARGV[2..] the owner fields
--
-- Returns the lock's PTTL (as PTTL answers it; -2 when the places are given
-- up), then per field in order 1 when it had a place (kept, or taken out), else
-- 0: a place that is gone was handed the lock (release.lua) or lapsed, and its
-- waiter asks again. The PTTL shows a lock handed to another waiter, whose
-- short lease runs out unannounced if that waiter died. A kept place's keys
-- live as long as their newest place.
--
-- Only ZSCORE, ZADD XX, ZREM and PEXPIRE: a place is never made here (a waiter
-- takes one with acquire.lua, at the back of the list). A user whose ACL lacks
-- the handoff keys (an ACL written before they existed) has no place to keep.
local life = ARGV[1]
if life == nil or #life > 15 or not string.find(life, '^%d+$') then
  return redis.error_reply('ERR lockwarden: place lifetime must be a whole number of milliseconds')
end
if #ARGV < 2 then
  return redis.error_reply('ERR lockwarden: places need at least one owner field')
end
local acl = redis.acl_check_cmd
local out = {-2}
if acl and not (acl('zscore', KEYS[2], 'f') and acl('zrem', KEYS[2], 'f')
    and acl('zadd', KEYS[2], 'xx', '1', 'f') and acl('pexpire', KEYS[1], '1')
    and acl('time') and acl('pttl', KEYS[3])) then
  for i = 2, #ARGV do
    out[i] = 0
  end
  return out
end
if life == '0' then
  for i = 2, #ARGV do
    out[i] = redis.call('zrem', KEYS[2], ARGV[i])
  end
  return out
end
out[1] = redis.call('pttl', KEYS[3])
local t = redis.call('time')
local lapses = string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(life))
local kept = false
for i = 2, #ARGV do
  local had = redis.call('zscore', KEYS[2], ARGV[i]) and 1 or 0
  if had == 1 then
    redis.call('zadd', KEYS[2], 'xx', lapses, ARGV[i])
    kept = true
  end
  out[i] = had
end
if kept then
  redis.call('pexpire', KEYS[1], life)
  redis.call('pexpire', KEYS[2], life)
end
return out
