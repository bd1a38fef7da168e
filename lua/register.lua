-- register.lua: write (or rewrite) a manager's entry in the client registry,
-- with its TTL, in one step (src/wire/registry.rs).
--
-- KEYS[1]  the entry, lockwarden:client:{<client id>}
-- ARGV[1]  its TTL in whole milliseconds, >= 1, as decimal digits (at most 15)
-- ARGV[2..] field, value, field, value ... (at least one pair)
--
-- Returns 1.
--
-- A script rather than MULTI HSET PEXPIRE EXEC: both keep the entry from ever
-- living without its TTL, but a transaction needs the MULTI and EXEC rights on
-- top of the script rights every lockwarden user has already, and when the ACL
-- refused MULTI, redis-rs 1.8's multiplexed connection overflowed counting the
-- transaction's replies (a panic in a debug build, inside its connection task).
-- Here PEXPIRE is asked for before the first write (acl_prelude.lua), so a user
-- without it gets NOPERM and no entry without a TTL.
local ttl = ARGV[1]
if ttl == nil or #ttl > 15 or not string.find(ttl, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: registry TTL must be a whole number of milliseconds >= 1')
end
if #ARGV < 3 or #ARGV % 2 ~= 1 then
  return redis.error_reply('ERR lockwarden: registry fields must come as field, value pairs')
end
need({{'PEXPIRE on the client entry', 'pexpire', KEYS[1], ttl}})
run('HSET on the client entry', 'hset', KEYS[1], unpack(ARGV, 2))
redis.call('pexpire', KEYS[1], ttl)
return 1
