-- fenced_write.lua: run one write on a data key only if the caller's fencing token
-- is not below the newest token that key has seen, and remember the token.
--
-- KEYS[1]  the fence, lockwarden_fence:{<data key's hash tag>}:<data key>: the
--          newest token accepted for that key (a string, no expiry), in the data
--          key's slot
-- KEYS[2]  the data key
-- KEYS[3]  (only with ARGV[2]) the lock hash the caller must still hold
-- ARGV[1]  the caller's fencing token, decimal digits
-- ARGV[2]  '' for a write fenced by the token alone; else the caller's owner field,
--          which must still be in KEYS[3]
-- ARGV[3]  how far ahead of this server's clock a token may be, in microseconds
-- ARGV[4]  the command to run on the data key (SET, HSET, INCRBY ...)
-- ARGV[5..] its arguments after the key
--
-- Returns {1, reply} when the write ran (reply is the command's own, absent for a
-- nil reply), {0, newest} when the token is below the newest one seen, {-1} when
-- ARGV[2] no longer holds the lock, {-2, clock} when the token is more than ARGV[3]
-- ahead of the server clock (clock: TIME in microseconds), {-3, what, value} when
-- the fence holds what no fenced write leaves there (what: 'text' and the first
-- 64 bytes of it, 'ahead' and the token it holds, or 'type' and the key's type),
-- or the command's own error. Every answer but {1, reply} wrote nothing.
--
-- Equal tokens pass: the same holder may write twice. The fence is written after
-- the command and only when the command succeeded, so a refused or failed command
-- leaves both keys as they were.
local token = ARGV[1]
if token == nil or not string.find(token, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: fencing token must be a whole number >= 1')
end
local margin = ARGV[3] and string.find(ARGV[3], '^%d+$') and tonumber(ARGV[3])
if not margin then
  return redis.error_reply('ERR lockwarden: token margin must be a whole number of microseconds')
end
if ARGV[4] == nil or ARGV[4] == '' then
  return redis.error_reply('ERR lockwarden: no command to run')
end
if ARGV[2] ~= '' and KEYS[3] == nil then
  return redis.error_reply('ERR lockwarden: an owner field without its lock key')
end

-- A lock's token is its server's clock in microseconds, or the last token plus one
-- when that is higher (acquire.lua), so none runs far ahead of the clock: a token
-- that does was made up, and accepted it would refuse every real holder until the
-- clock caught up. More than 16 digits is beyond any clock before the year 2286
-- (and beyond what a Lua number holds exactly); ARGV[3] covers clock skew between
-- the lock's server and this one.
if redis.acl_check_cmd and not redis.acl_check_cmd('time') then
  return redis.error_reply('NOPERM lockwarden: this Redis user may not run TIME')
end
local t = redis.call('time')
local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = clock + margin
if #token > 16 or tonumber(token) > limit then
  return {-2, clock}
end

-- The fence holds what this script wrote there: a token no further ahead of the
-- clock than the one just checked. Anything else (text, a hash, a made-up token)
-- was written by someone else, and comparing with it would refuse every holder or
-- none: say so instead of failing on it.
local newest = redis.pcall('get', KEYS[1])
if type(newest) == 'table' and newest.err then
  if string.find(newest.err, '^WRONGTYPE') then
    local kind = redis.pcall('type', KEYS[1])
    return {-3, 'type', type(kind) == 'table' and kind.ok or 'not a string'}
  end
  return newest
end
if newest then
  if #newest > 16 or not string.find(newest, '^[1-9]%d*$') then
    return {-3, 'text', string.sub(newest, 1, 64)}
  end
  if tonumber(newest) > limit then
    return {-3, 'ahead', newest}
  end
  if tonumber(newest) > tonumber(token) then
    return {0, tonumber(newest)}
  end
end
if ARGV[2] ~= '' and redis.call('hexists', KEYS[3], ARGV[2]) == 0 then
  return {-1}
end

-- ACL: the fence's SET comes after the data's write, so it is asked for first
-- (Redis 7): a denial then writes nothing.
if redis.acl_check_cmd and not redis.acl_check_cmd('set', KEYS[1], token) then
  return redis.error_reply('NOPERM lockwarden: this Redis user may not run SET on the fence')
end
local reply = redis.pcall(ARGV[4], KEYS[2], unpack(ARGV, 5))
if type(reply) == 'table' and reply.err then
  return reply
end
if newest ~= token then
  redis.call('set', KEYS[1], token)
end
return {1, reply}
