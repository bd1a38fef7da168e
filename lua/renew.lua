-- renew.lua: extend the lease of many held locks in one call (the watchdog).
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in whole milliseconds, >= 1
-- ARGV[i+1]  the owner field that should hold KEYS[i]
--
-- Returns an array with one entry per key: 1 when that owner still holds it (its
-- TTL is now the lease), 0 when it does not (expired, force-unlocked, or the data
-- was lost), in which case nothing is changed for that key.
--
-- Only HEXISTS and PEXPIRE are used: neither is refused when Redis is out of
-- memory, so renewal keeps working then.
local lease = tonumber(ARGV[1])
if lease == nil or lease < 1 or lease ~= math.floor(lease) then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if #ARGV ~= #KEYS + 1 then
  return redis.error_reply('ERR lockwarden: renew needs one owner field per key')
end

-- The lease goes to PEXPIRE as the string it came as: a Lua number would be
-- formatted again for every key, about a seventh of this loop's cost.
local ms = ARGV[1]
local held = {}
local acl = redis.acl_check_cmd
for i = 1, #KEYS do
  local key = KEYS[i]
  -- ACL (Redis 7+): a denial is named instead of failing the call as Redis words
  -- it. Each key's PEXPIRE is a whole renewal, so one denied halfway leaves the
  -- earlier keys renewed and nothing half done.
  local h = redis.pcall('hexists', key, ARGV[i + 1])
  if h == 1 then
    local r = redis.pcall('pexpire', key, ms)
    if type(r) == 'table' then
      if acl and not acl('pexpire', key, ms) then
        return redis.error_reply('NOPERM lockwarden: this Redis user may not run PEXPIRE on the lock')
      end
      return r
    end
    held[i] = 1
  elseif h == 0 then
    held[i] = 0
  else
    if acl and not acl('hexists', key, ARGV[i + 1]) then
      return redis.error_reply('NOPERM lockwarden: this Redis user may not run HEXISTS on the lock')
    end
    return h
  end
end
return held
