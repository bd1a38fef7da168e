-- expirable_renew.lua: extend the expiry of one holder's permits of a permit-expirable
-- semaphore (the watchdog), on the Redis clock.
--
-- KEYS[1]  the semaphore key
-- KEYS[2]  its permits, {<name>}:timeout
-- KEYS[3]  its channel, redisson_sc:{<name>}
-- ARGV[1]  the lease in ms, >= 1
-- ARGV[2]  the holder's permit ids, 32 hex digits each, separated by ','
--
-- Returns 1 when every permit was still taken and now expires a lease from now,
-- 0 when any had expired or was gone: the holder lost them. An expired permit
-- found here is given back at once (and the waiters told), not at the next
-- acquisition.
-- The writes asked for before the first (ACL, acl_prelude.lua).
need({
  {'ZREM on the permits', 'zrem', KEYS[2], 'x'},
  {'INCRBY on the semaphore', 'incrby', KEYS[1], '1'},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[3], '0'},
  {'ZADD on the permits', 'zadd', KEYS[2], 'xx', '1', 'x'},
})
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = {}
for hex in string.gmatch(ARGV[2], '[^,]+') do
  ids[#ids + 1] = hex:gsub('..', function(h) return string.char(tonumber(h, 16)) end)
end
local held = 1
local lapsed = 0
for _, id in ipairs(ids) do
  local expiry = redis.call('zscore', KEYS[2], id)
  if not expiry then
    held = 0
  elseif tonumber(expiry) <= now then
    held = 0
    lapsed = lapsed + redis.call('zrem', KEYS[2], id)
  end
end
if lapsed > 0 then
  local value = redis.call('incrby', KEYS[1], lapsed)
  redis.call('publish', KEYS[3], value)
end
if held == 1 then
  local expiry = now + tonumber(ARGV[1])
  for _, id in ipairs(ids) do
    redis.call('zadd', KEYS[2], 'xx', expiry, id)
  end
end
return held
