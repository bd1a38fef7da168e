-- acquire.lua: take an exclusive reentrant lock, or re-enter it as its current owner.
--
-- KEYS[1]  the lock hash (the lock name itself): owner field -> hold count
-- KEYS[2]  the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1]  lease in whole milliseconds, >= 1, as decimal digits (at most 15)
-- ARGV[2]  owner field, "<client id>:<owner number>"
--
-- Returns {1, token, holds} when the caller now holds the lock (token is the new
-- fencing token, holds the caller's hold count), or {0, pttl} when another owner
-- holds it (pttl as PTTL reports it: -1 means the key has no expiry).
--
-- A script is not a transaction: a write made before an error stays. So every
-- argument is checked before the first write, and the order of writes is chosen so
-- that no failure can leave a lock hash without a TTL. Numbers are checked as text
-- and handed to Redis as the caller sent them: converting them to Lua numbers and
-- back costs more than any command here, and a number that Lua reads but PEXPIRE
-- refuses ("1e3") would fail after the first write.
local lease = ARGV[1]
if lease == nil or #lease > 15 or not string.find(lease, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if ARGV[2] == nil or ARGV[2] == '' then
  return redis.error_reply('ERR lockwarden: empty owner field')
end

if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local holds = redis.call('hincrby', KEYS[1], ARGV[2], '1')
  redis.call('pexpire', KEYS[1], lease)
  local token = redis.call('incr', KEYS[2])
  -- INCR answering 1 means the counter was missing (first use, or Redis restarted
  -- empty). It is then seeded from the server clock in microseconds, so tokens
  -- never go backwards across a restart unless more than a million acquisitions a
  -- second had been made on this lock. Checking with INCR itself instead of an
  -- EXISTS first saves a command on every acquisition but the first.
  if token == 1 then
    local now = redis.call('time')
    redis.call('set', KEYS[2], now[1] .. string.rep('0', 6 - #now[2]) .. now[2])
    token = redis.call('incr', KEYS[2])
  end
  return {1, token, holds}
end

return {0, redis.call('pttl', KEYS[1])}
