-- acquire.lua: take an exclusive reentrant lock, or re-enter it as its current owner.
--
-- KEYS[1]  the lock hash (the lock name itself): owner field -> hold count
-- KEYS[2]  the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1]  lease in whole milliseconds, >= 1, as decimal digits (at most 15)
-- ARGV[2]  owner field, "<client id>:<owner number>"
-- ARGV[3]  lifetime of the token counter in whole milliseconds, >= 1, set again at
--          every grant
--
-- Returns {1, token, holds} when the caller now holds the lock (token is the new
-- fencing token, holds the caller's hold count), or {0, pttl} when another owner
-- holds it (pttl as PTTL reports it: -1 means the key has no expiry).
--
-- A script is not a transaction: a write made before an error stays. So every
-- argument, and the caller's right to run each command of the path taken (ACL), is
-- checked before the first write, and the order of writes is chosen so that no
-- failure can leave a lock hash without a TTL. Numbers are checked as text and
-- handed to Redis as the caller sent them: converting them to Lua numbers and back
-- costs more than any command here, and a number that Lua reads but PEXPIRE refuses
-- ("1e3") would fail after the first write.
local lease, keep = ARGV[1], ARGV[3]
if lease == nil or #lease > 15 or not string.find(lease, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if ARGV[2] == nil or ARGV[2] == '' then
  return redis.error_reply('ERR lockwarden: empty owner field')
end
if keep == nil or #keep > 15 or not string.find(keep, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: token lifetime must be a whole number of milliseconds >= 1')
end

-- ACL: a denied command inside a script fails the script where it stands, after
-- the writes before it. Asking first (Redis 7 and later) turns a missing right
-- into a NOPERM reply that names the command, with nothing written. The reads come
-- first and write nothing, but are asked too, so that the reply names them.
local acl = redis.acl_check_cmd
if acl then
  local denied = (not acl('exists', KEYS[1]) and 'EXISTS on the lock')
    or (not acl('hexists', KEYS[1], ARGV[2]) and 'HEXISTS on the lock')
    or (not acl('hincrby', KEYS[1], ARGV[2], '1') and 'HINCRBY on the lock')
    or (not acl('pexpire', KEYS[1], lease) and 'PEXPIRE on the lock')
    or (not acl('pttl', KEYS[1]) and 'PTTL on the lock')
    or (not acl('time') and 'TIME')
    or (not acl('incr', KEYS[2]) and 'INCR on the token counter')
    or (not acl('set', KEYS[2], '1', 'px', keep) and 'SET on the token counter')
    or (not acl('pexpire', KEYS[2], keep) and 'PEXPIRE on the token counter')
  if denied then
    return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. denied)
  end
end

if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local holds = redis.call('hincrby', KEYS[1], ARGV[2], '1')
  redis.call('pexpire', KEYS[1], lease)
  -- The token is the counter plus one, but never less than the server clock in
  -- microseconds (TIME). The counter alone goes back in time whenever Redis loses
  -- recent writes (a restart from an older snapshot, a failover to a replica that
  -- missed them, the counter's own expiry) and would hand out a token again; the
  -- clock does not go back with the data. So after such a loss the next token is
  -- still above every earlier one, as long as the server clock now is past the
  -- moment those were issued (docs/faults.md). Tokens thus follow the clock, and
  -- only more than one grant of a lock per microsecond would run them ahead of it.
  -- Both numbers stay below 2^53, so Lua compares them exactly.
  local t = redis.call('time')
  local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  local token = redis.call('incr', KEYS[2])
  if token <= tonumber(now) then
    token = tonumber(now)
    redis.call('set', KEYS[2], now, 'px', keep)
  else
    redis.call('pexpire', KEYS[2], keep)
  end
  return {1, token, holds}
end

return {0, redis.call('pttl', KEYS[1])}
