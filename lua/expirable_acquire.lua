-- expirable_acquire.lua: take permits of a permit-expirable semaphore, each with an id
-- and an expiry on the Redis clock; first give back every permit whose expiry has
-- passed.
--
-- Redisson's RPermitExpirableSemaphore layout: the available permits in a string
-- at the name, the permits taken in a sorted set {<name>}:timeout of permit id
-- (16 raw bytes) -> expiry in Unix ms. Unlike Redisson, which computes expiries
-- from each client's clock, the expiry here is the server's TIME plus the lease.
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  its permits, {<name>}:timeout
-- KEYS[3]  its channel, redisson_sc:{<name>}
-- ARGV[1]  permits to take, >= 0 (0 only reclaims and reports)
-- ARGV[2]  the lease in ms, >= 1
-- ARGV[3]  Redisson's "no expiry" score; a permit with it never expires
-- ARGV[4]  the op marker's lifetime in ms
-- ARGV[5..] one permit id per permit, 32 hex digits (stored as 16 bytes)
-- KEYS[4]  the waiter's op marker (once_prelude.lua)
--
-- A waiter keeps its op id and its permit ids across its attempts: asked again
-- after a lost reply, the marker says whether a copy took them already
-- ({1, available}, nothing taken twice). A waiter that left undid the id
-- (expirable_release.lua with the marker): a later copy takes nothing.
--
-- Returns {1, left} when taken (left: available after), or {0, available, wait,
-- missing}: too few available; wait is the ms until the nearest expiry, -1 for
-- none; missing is 1 when the key does not exist at all (no release will come
-- but a permit's expiry), else 0.
-- Every write of the script is asked for before the first (ACL,
-- acl_prelude.lua), the PUBLISH that a release or a reclaim of these permits
-- needs among them: a permit taken that cannot be announced back would keep the
-- waiters asleep past its return.
need({
  {'ZREM on the permits', 'zrem', KEYS[2], 'x'},
  {'INCRBY on the semaphore', 'incrby', KEYS[1], '1'},
  {'DECRBY on the semaphore', 'decrby', KEYS[1], '1'},
  {'ZADD on the permits', 'zadd', KEYS[2], '1', 'x'},
  {'PEXPIRE on the permits', 'pexpire', KEYS[2], '1'},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[3], '0'},
  once_need(KEYS[4]),
})
local ttl = once_ttl(4)
local seen = once_seen(KEYS[4])
if seen then
  local have = tonumber(redis.call('get', KEYS[1]) or '0') or 0
  if seen == 'taken' then
    return {1, have}
  end
  return {0, have, -1, 0}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lapsed = redis.call('zrangebyscore', KEYS[2], 0, now)
if #lapsed > 0 then
  redis.call('zrem', KEYS[2], unpack(lapsed))
  local value = redis.call('incrby', KEYS[1], #lapsed)
  if tonumber(value) > 0 then
    redis.call('publish', KEYS[3], value)
  end
end
local raw = redis.call('get', KEYS[1])
local have = tonumber(raw or '0') or 0
local want = tonumber(ARGV[1])
if have >= want then
  local left = have
  if want > 0 then
    left = redis.call('decrby', KEYS[1], want)
    local expiry = now + tonumber(ARGV[2])
    for i = 5, #ARGV do
      local id = ARGV[i]:gsub('..', function(h) return string.char(tonumber(h, 16)) end)
      redis.call('zadd', KEYS[2], expiry, id)
    end
    -- A TTL a Java user put on the semaphore covers its permits too.
    local key_ttl = redis.call('pttl', KEYS[1])
    if key_ttl > 0 then
      redis.call('pexpire', KEYS[2], key_ttl)
    end
    once_note(KEYS[4], 'taken', ttl)
  end
  return {1, left}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
local wait = -1
if first[2] ~= nil and first[2] ~= ARGV[3] then
  wait = math.max(tonumber(first[2]) - now, 0)
end
local missing = 0
if not raw then
  missing = 1
end
return {0, have, wait, missing}
