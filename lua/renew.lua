-- renew.lua: extend the lease of many held locks in one call (the watchdog).
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in whole milliseconds, >= 1
-- ARGV[i+1]  the owner field that should hold KEYS[i]
-- ARGV[#KEYS+2]  optional, "1": the caller gives its locks a lock-delay, so a hash
--            may carry the mark "lockwarden:delay" = "<lease end>,<delay>" (see
--            acquire.lua): a hold whose lease end has passed is lost (0, nothing
--            changed), and a live one gets a TTL of lease + delay and a new end
--
-- Returns an array with one entry per key: 1 when that owner still holds it (its
-- TTL is now the lease), 0 when it does not (expired, force-unlocked, or the data
-- was lost), in which case nothing is changed for that key.
--
-- Only HEXISTS and PEXPIRE are used (and for marked holds HMGET, TIME, and an HSET
-- after the PEXPIRE): none is refused when Redis is out of memory, so renewal
-- keeps working then.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease ~= math.floor(lease) then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
local marked = #ARGV == #KEYS + 2 and ARGV[#ARGV] == '1'
if #ARGV ~= #KEYS + 1 and not marked then
  return redis.error_reply('ERR lockwarden: renew needs one owner field per key')
end

-- The lease goes to PEXPIRE as the string it came as: a Lua number would be
-- formatted again for every key, about a seventh of this loop's cost.
local ms = ARGV[1]
local held = {}
local acl = redis.acl_check_cmd
-- The server clock in ms, read once, when a mark is first met.
local now_ms
for i = 1, #KEYS do
  local key = KEYS[i]
  -- ACL (Redis 7+): a denial is named instead of failing the call as Redis words
  -- it. Each key's PEXPIRE is a whole renewal, so one denied halfway leaves the
  -- earlier keys renewed and nothing half done.
  local h, mark
  if marked then
    -- The hold and its lock-delay mark in one command.
    local got = redis.pcall('hmget', key, ARGV[i + 1], 'lockwarden:delay')
    if got.err then
      if acl and not acl('hmget', key, ARGV[i + 1], 'lockwarden:delay') then
        return redis.error_reply('NOPERM lockwarden: this Redis user may not run HMGET on the lock')
      end
      return got
    end
    h = got[1] and 1 or 0
    mark = got[2] or nil
  else
    h = redis.pcall('hexists', key, ARGV[i + 1])
    if type(h) == 'table' then
      if acl and not acl('hexists', key, ARGV[i + 1]) then
        return redis.error_reply('NOPERM lockwarden: this Redis user may not run HEXISTS on the lock')
      end
      return h
    end
  end
  local ttl, delay = ms, nil
  if h == 1 and mark then
    if not now_ms then
      local t = redis.call('time')
      now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
    end
    local lease_end
    lease_end, delay = string.match(mark, '^(%d+),(%d+)$')
    if lease_end == nil or tonumber(lease_end) <= now_ms then
      -- The lease ran out before this renewal: the hold is lost, and the hash
      -- stays only to keep others out for the delay.
      h = 0
    else
      ttl = string.format('%.0f', lease + tonumber(delay))
    end
  end
  if h == 1 then
    local r = redis.pcall('pexpire', key, ttl)
    if type(r) == 'table' then
      if acl and not acl('pexpire', key, ttl) then
        return redis.error_reply('NOPERM lockwarden: this Redis user may not run PEXPIRE on the lock')
      end
      return r
    end
    if delay then
      -- After the PEXPIRE (a write), so never refused out of memory.
      redis.call('hset', key, 'lockwarden:delay', string.format('%.0f,%s', now_ms + lease, delay))
    end
    held[i] = 1
  else
    held[i] = 0
  end
end
return held
