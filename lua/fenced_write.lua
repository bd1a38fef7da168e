-- fenced_write.lua: run one write on a data key only if the caller's fencing token
-- is not below the newest token that key has seen, and remember the token.
--
-- KEYS[1]  the fence, lockwarden_fence:{<data key's hash tag>}:<data key>: the
--          newest token accepted for that key (a string, no expiry), in the data
--          key's slot
-- KEYS[2]  the data key
-- KEYS[3]  (only with ARGV[2]) the lock hash the caller must still hold
-- ARGV[1]  the caller's fencing token, decimal digits (at most 16: tokens follow
--          the server clock in microseconds, below 2^53, so Lua compares them
--          exactly)
-- ARGV[2]  '' for a write fenced by the token alone; else the caller's owner field,
--          which must still be in KEYS[3]
-- ARGV[3]  the command to run on the data key (SET, HSET, INCRBY ...)
-- ARGV[4..] its arguments after the key
--
-- Returns {1, reply} when the write ran (reply is the command's own, absent for a
-- nil reply), {0, newest} when the token is below the newest one seen (nothing
-- written), {-1} when ARGV[2] no longer holds the lock (nothing written), or the
-- command's own error (nothing written, the fence unchanged).
--
-- Equal tokens pass: the same holder may write twice. The fence is written after
-- the command and only when the command succeeded, so a refused or failed command
-- leaves both keys as they were.
local token = ARGV[1]
if token == nil or #token > 16 or not string.find(token, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: fencing token must be a whole number >= 1')
end
if ARGV[3] == nil or ARGV[3] == '' then
  return redis.error_reply('ERR lockwarden: no command to run')
end
if ARGV[2] ~= '' and KEYS[3] == nil then
  return redis.error_reply('ERR lockwarden: an owner field without its lock key')
end

local newest = redis.call('get', KEYS[1])
if newest and tonumber(newest) > tonumber(token) then
  return {0, tonumber(newest)}
end
if ARGV[2] ~= '' and redis.call('hexists', KEYS[3], ARGV[2]) == 0 then
  return {-1}
end

-- ACL: the fence's SET comes after the data's write, so it is asked for first
-- (Redis 7): a denial then writes nothing.
if redis.acl_check_cmd and not redis.acl_check_cmd('set', KEYS[1], token) then
  return redis.error_reply('NOPERM lockwarden: this Redis user may not run SET on the fence')
end
local reply = redis.pcall(ARGV[3], KEYS[2], unpack(ARGV, 4))
if type(reply) == 'table' and reply.err then
  return reply
end
if newest ~= token then
  redis.call('set', KEYS[1], token)
end
return {1, reply}
