-- sync_inspect.lua: one look at a key that may be a semaphore or a count-down
-- latch (Redisson keeps both as an integer string at the name).
--
-- KEYS[1]  the key, the name itself
-- KEYS[2]  its kind label, lockwarden_kind:{<name>} (src/wire/synchronizer.rs, label)
-- KEYS[3]  a permit-expirable semaphore's taken permits, {<name>}:timeout
--
-- Returns {value, pttl, label, taken}: the string at the key (false when there is
-- no string there), its PTTL (-2: none, -1: no expiry), the label's text (false
-- when unlabelled), and how many permits in KEYS[3] have not expired by the
-- server's clock (-1 when KEYS[3] is not a sorted set, so this is no
-- permit-expirable semaphore with permits out). Read-only.
if redis.call('type', KEYS[1]).ok ~= 'string' then
  return {false, -2, false, -1}
end
local taken = -1
if redis.call('type', KEYS[3]).ok == 'zset' then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  taken = redis.call('zcount', KEYS[3], '(' .. now, '+inf')
end
local label = false
if redis.call('type', KEYS[2]).ok == 'string' then
  label = redis.call('get', KEYS[2])
end
return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]), label, taken}
