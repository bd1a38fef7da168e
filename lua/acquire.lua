-- acquire.lua: take an exclusive reentrant lock, or re-enter it as its current owner.
--
-- KEYS[1]  the lock hash (the lock name itself): owner field -> hold count
-- KEYS[2]  the fencing token counter, redisson_lock_token:{<name>}
-- ARGV[1]  lease in whole milliseconds, >= 1, as decimal digits (at most 15)
-- ARGV[2]  owner field, "<client id>:<owner number>"
-- ARGV[3]  lifetime of the token counter in whole milliseconds, >= 1, set again at
--          every grant
-- ARGV[4]  "1" when the caller knows the owner field does not hold the lock (it
--          was made for this acquisition) and an earlier attempt found the key a
--          lock hash: a busy lock is then not asked whether it is the caller's,
--          which makes a refusal two commands instead of three; else "0" or absent
--          (a re-entry is possible, and HEXISTS also refuses a key of another type);
--          "2" for a non-reentrant lock: a caller that holds it already is refused
--          (Redisson's non-reentrant lock refuses it too, as an error)
-- ARGV[5]  lock-delay in whole milliseconds, "0" or absent for none. With one, a
--          grant marks the hash with the field "lockwarden:delay" = "<end>,<delay>"
--          (<end>: when the lease ends, server ms) and gives the hash a TTL of lease
--          + delay: a lease that runs out unreleased leaves the hash, and so the
--          lock, taken for the delay (docs/protocol.md, "Lock-delay")
--
-- KEYS[3]  the handoff queue, lockwarden_handoff_queue:{<name>} (a list of the
--          fields waiting for a direct handoff, head first; docs/protocol.md,
--          "Direct handoff")
-- KEYS[4]  the handoff deadlines, lockwarden_handoff_timeout:{<name>} (a zset:
--          field -> the server time in ms its place lapses at)
-- ARGV[6]  how long the caller's place in the handoff queue lives, in whole
--          milliseconds; "0" or absent: the caller takes no place. With a place,
--          the caller's field was made for this wait (it holds nothing of its
--          own), so a hold of that field can only be a handoff that
--          release.lua made to it: it is reported as granted ({1, token, holds},
--          token the counter's), its lease set to ARGV[1] and its place gone.
--          A busy answer keeps (or takes, at the back) the caller's place, and a
--          grant takes the caller out of the queue.
--
-- Returns {1, token, holds} when the caller now holds the lock (token is the new
-- fencing token, holds the caller's hold count), or {0, pttl} when another owner
-- holds it (pttl as PTTL reports it: -1 means the key has no expiry), or {-2} when
-- the caller holds it and ARGV[4] is "2" (nothing changed).
--
-- A script is not a transaction: a write made before an error stays. So every
-- argument, and the caller's right to run each command that follows the first
-- write (ACL), is checked before the first write, and the order of writes is chosen
-- so that no failure can leave a lock hash without a TTL. Numbers are checked as
-- text and handed to Redis as the caller sent them: converting them to Lua numbers
-- and back costs more than any command here, and a number that Lua reads but
-- PEXPIRE refuses ("1e3") would fail after the first write.
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
if ARGV[4] ~= nil and ARGV[4] ~= '0' and ARGV[4] ~= '1' and ARGV[4] ~= '2' then
  return redis.error_reply('ERR lockwarden: new-owner flag must be 0, 1 or 2')
end
local place = ARGV[6]
if place == '0' or KEYS[4] == nil then
  place = nil
end
if place ~= nil and (#place > 15 or not string.find(place, '^[1-9]%d*$')) then
  return redis.error_reply('ERR lockwarden: place lifetime must be a whole number of milliseconds')
end
local delay = ARGV[5]
if delay == '0' then
  delay = nil
end
if delay ~= nil and (#delay > 15 or not string.find(delay, '^[1-9]%d*$')) then
  return redis.error_reply('ERR lockwarden: lock-delay must be a whole number of milliseconds')
end

-- ACL: a command the ACL denies inside a script fails the script where it
-- stands, after the writes before it (a hash without its TTL, held forever). So
-- the commands that come after the first write, and the PUBLISH its release will
-- need, are asked for first
-- (redis.acl_check_cmd, Redis 7 and later), on the grant path only, and those up
-- to the first write run with redis.pcall: a denial of one of them has written
-- nothing, and `refused` only names it. Asking for every command up front would
-- cost as much as the commands themselves on every call.
local acl = redis.acl_check_cmd

-- The reply for the error `err` of a command run with redis.pcall: a NOPERM one
-- naming `what` when the ACL denies the command (the rest of the arguments),
-- else the error itself (WRONGTYPE, OOM ...).
local function refused(err, what, ...)
  if acl and not acl(...) then
    return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. what)
  end
  return err
end

-- PTTL first: -2 says the lock is free, and otherwise it is the busy answer's
-- number. A caller that finds the lock held (the common case under contention)
-- thus costs two commands, PTTL and HEXISTS, where EXISTS, HEXISTS and PTTL were
-- three; one, PTTL, on a retry for a new owner (ARGV[4]).
local pttl = redis.pcall('pttl', KEYS[1])
if type(pttl) == 'table' then
  return refused(pttl, 'PTTL on the lock', 'pttl', KEYS[1])
end
local exists = (pttl == -2) and 0 or 1
local mine = 0
-- The server clock, read once when needed (a lock-delay mark to check or to write).
local t
if exists == 1 and place then
  -- A waiter with a place: a hold of its field is the handoff it waits for (a
  -- message that was lost, or one that crossed this call).
  local handed = redis.pcall('hget', KEYS[1], ARGV[2])
  if type(handed) == 'table' then
    return refused(handed, 'HGET on the lock', 'hget', KEYS[1], ARGV[2])
  end
  if handed then
    -- The lease the release gave it is short (a receiver that died costs the
    -- lock no more): it becomes the caller's own. A write, so that a WAIT
    -- behind this call confirms the handoff too (one replication stream, in
    -- order). A user that may not PEXPIRE keeps the short lease; its
    -- renewals extend it.
    if not acl or acl('pexpire', KEYS[1], lease) then
      redis.call('pexpire', KEYS[1], lease)
    end
    redis.pcall('zrem', KEYS[4], ARGV[2])
    return {1, tonumber(redis.call('get', KEYS[2]) or '0'), tonumber(handed)}
  end
elseif exists == 1 and ARGV[4] ~= '1' and delay then
  -- A caller with a lock-delay reads its hold and the lock-delay mark in one
  -- command (HMGET: its ACL needs it); the others ask HEXISTS alone, as before.
  local got = redis.pcall('hmget', KEYS[1], ARGV[2], 'lockwarden:delay')
  if got.err then
    return refused(got, 'HMGET on the lock', 'hmget', KEYS[1], ARGV[2], 'lockwarden:delay')
  end
  mine = got[1] and 1 or 0
  if mine == 1 and got[2] then
    -- The caller's lease has run out: its hold only marks the lock-delay now, and
    -- the lock is busy until the hash expires.
    t = redis.call('time')
    local lease_end = tonumber(string.match(got[2], '^(%d+),'))
    if lease_end and t[1] * 1000 + math.floor(t[2] / 1000) >= lease_end then
      return {0, pttl}
    end
  end
elseif exists == 1 and ARGV[4] ~= '1' then
  mine = redis.pcall('hexists', KEYS[1], ARGV[2])
  if type(mine) == 'table' then
    return refused(mine, 'HEXISTS on the lock', 'hexists', KEYS[1], ARGV[2])
  end
end
if mine == 1 and ARGV[4] == '2' then
  return {-2}
end

if exists == 0 or mine == 1 then
  if acl then
    -- The release will publish on the unlock channel (KEYS[2] with the token
    -- counter's prefix, 20 bytes, swapped for the channel's): a user that may take
    -- the lock but not announce its release would leave it held for a whole lease,
    -- so the grant is refused instead.
    local denied = (not acl('pexpire', KEYS[1], lease) and 'PEXPIRE on the lock')
      or (not acl('time') and 'TIME')
      or (not acl('set', KEYS[2], '1', 'px', keep, 'get') and 'SET on the token counter')
      or (not acl('publish', 'redisson_lock__channel:' .. string.sub(KEYS[2], 21), '0')
        and 'PUBLISH on the unlock channel')
      or (delay and not acl('hset', KEYS[1], 'lockwarden:delay', '0,0') and 'HSET on the lock')
    if denied then
      return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. denied)
    end
  end
  -- The first write: refused with nothing written when denied or out of memory.
  local holds = redis.pcall('hincrby', KEYS[1], ARGV[2], '1')
  if type(holds) == 'table' then
    return refused(holds, 'HINCRBY on the lock', 'hincrby', KEYS[1], ARGV[2], '1')
  end
  t = t or redis.call('time')
  if delay then
    -- Lock-delay: the hash outlives the lease by the delay, and says when the
    -- lease ends (a clean release deletes it, so only a lapse is delayed).
    local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
    redis.call('pexpire', KEYS[1], string.format('%.0f', tonumber(lease) + tonumber(delay)))
    redis.call('hset', KEYS[1], 'lockwarden:delay',
      string.format('%.0f,%s', now_ms + tonumber(lease), delay))
  else
    redis.call('pexpire', KEYS[1], lease)
  end
  -- The fencing token (lua/token_prelude.lua).
  local token = next_token(KEYS[2], t, keep)
  if place then
    -- Out of the handoff queue: its list entry, if any, is skipped when popped
    -- (no deadline left), which costs less than an LREM over the list here. A
    -- user without the right leaves the place to lapse.
    redis.pcall('zrem', KEYS[4], ARGV[2])
  end
  return {1, token, holds}
end

if place then
  -- Busy: keep the caller's place (or take one at the back). Both keys live as long as their newest place, so waiters
  -- that all died leave nothing behind. A user without the rights to the
  -- handoff keys (an ACL written before they existed) takes no place and waits
  -- as before: the handoff is an optimisation, not a right to refuse.
  if acl and not (acl('zadd', KEYS[4], '1', ARGV[2]) and acl('rpush', KEYS[3], ARGV[2])
      and acl('pexpire', KEYS[3], place) and acl('time')) then
    return {0, pttl}
  end
  t = t or redis.call('time')
  local lapses = string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(place))
  local new = redis.pcall('zadd', KEYS[4], lapses, ARGV[2])
  if type(new) == 'table' then
    return {0, pttl}
  end
  if new == 1 then
    redis.call('rpush', KEYS[3], ARGV[2])
  end
  redis.call('pexpire', KEYS[3], place)
  redis.call('pexpire', KEYS[4], place)
  return {0, pttl}
end
return {0, pttl}
