-- inspect.lua: read a lock's holders, remaining TTL and fair queue in one
-- consistent look.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fair-lock queue, redisson_lock_queue:{<name>}
-- KEYS[3]  the fair-lock deadlines, redisson_lock_timeout:{<name>}
--
-- Returns {pttl, {field1, value1, field2, ...}, {queued owner field, ms left, ...}}
-- with pttl as PTTL reports it (-2: no such key, -1: no expiry). The queue is head
-- first and empty when there is none (or KEYS[2] is not a list); "ms left" is the
-- waiter's deadline minus the server's clock (TIME), so no client clock is involved:
-- negative once its place has lapsed (it goes at the next fair script), -1 with no
-- deadline at all. A lock key of another type than hash is an error. Read-only.
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE lockwarden: key is a ' .. kind .. ', not a lock')
end
local queue = {}
if redis.call('type', KEYS[2]).ok == 'list' then
  local has_deadlines = redis.call('type', KEYS[3]).ok == 'zset'
  local now = redis.call('time')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  for _, field in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do
    local deadline = has_deadlines and redis.call('zscore', KEYS[3], field)
    queue[#queue + 1] = field
    if deadline then
      queue[#queue + 1] = math.floor(tonumber(deadline) - now_ms)
    else
      queue[#queue + 1] = -1
    end
  end
end
if kind == 'none' then
  return {-2, {}, queue}
end
return {redis.call('pttl', KEYS[1]), redis.call('hgetall', KEYS[1]), queue}
