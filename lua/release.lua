-- release.lua: give back one hold of an exclusive lock; at zero, delete it and wake a waiter.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel, redisson_lock__channel:{<name>}
-- KEYS[3]  the release latch, redisson_unlock_latch:{<name>}:<request id>
-- ARGV[1]  lease in whole milliseconds, >= 1, set again when holds remain (decimal
--          digits, at most 15, as every number here)
-- ARGV[2]  owner field
-- ARGV[3]  latch lifetime in whole milliseconds, >= 1
-- ARGV[4]  the message to publish when the lock frees ("0": wake one waiter)
-- ARGV[5]  "1" when this is a retry of a release whose reply was lost, else "0"
--          (or absent)
-- ARGV[6]  "1" when the lock is handed to a new owner in the same script call
--          (transfer.lua): nothing is published, nobody is woken; else "0" or absent
-- KEYS[4]  the fencing token counter (acquire.lua's KEYS[2])
-- KEYS[5]  the handoff queue (acquire.lua's KEYS[3])
-- KEYS[6]  the handoff deadlines (acquire.lua's KEYS[4]); KEYS[4..6] absent: no
--          handoff
-- ARGV[7]  the lease a handoff gives its receiver, in whole milliseconds: short,
--          because the receiver extends it at once, and a receiver that froze
--          (still subscribed, not acting) costs the lock no more than this
-- ARGV[8]  lifetime of the token counter in whole milliseconds (acquire.lua's
--          ARGV[3])
--
-- Direct handoff: a release that frees the lock (not a quiet one) pops the handoff
-- queue up to its first live place and makes that field the holder in the same
-- call (one hold, the short lease, a new fencing token as acquire.lua makes
-- them), then tells its process on lockwarden_handoff__channel:{<name>}:<client
-- id> with "g<token>,<field>", unless nobody hears that (the process died, or
-- does not listen yet): then the hold is taken back and the next place looked
-- at. It publishes no unlock message after a handoff, as a
-- hand-over by transfer.lua does not: a waiter it woke (a Redisson client, or a
-- lockwarden one without a place) would only find the lock taken. A Redisson
-- client is thus excluded as before and woken by the release that frees the
-- lock for good (or asks again when the lease it was told of runs out).
--
-- Returns the caller's remaining hold count: > 0 when it is still held by the
-- caller, -1 when the caller does not hold it (nothing is changed then), and when
-- the lock was freed {0, heard}: heard is what PUBLISH answered, how many
-- subscriptions (processes) received the unlock message; {0, waiting, 1} after
-- a handoff (waiting: 1 plus the places left in the handoff queue), so that the releasing
-- process knows whether other processes wait (it yields the lock to them rather
-- than hand it to its own next waiter). A retry answered from the latch returns a
-- plain 0 (who heard the first attempt is not known). Handing over (ARGV[6]), the
-- freed answer is {0}.
--
-- The latch records the outcome under the request id, so a release retried after
-- its reply was lost returns the first outcome instead of releasing twice. Every
-- attempt writes the latch; only a retry reads it: a first attempt carries a fresh
-- request id, so there is nothing to read yet, and the GET would be a wasted
-- command on every release.
--
-- A command the ACL denies would fail the script after its earlier writes (a DEL
-- without its PUBLISH), so the rights are asked first, as in acquire.lua.
--
-- Out of memory under noeviction, Redis refuses a script's memory-growing command
-- only while the script has written nothing yet. So the first write here is always
-- one that is never refused (PEXPIRE or DEL): a release must work even then.
--
-- Numbers are checked as text and passed on as sent (see acquire.lua).
--
-- A hold that remains keeps a lock-delay mark (acquire.lua's "lockwarden:delay")
-- true: its TTL becomes lease + delay and its lease end moves on. The last hold's
-- DEL takes the mark with it: a released lock is never delayed.
local lease, latch_ttl = ARGV[1], ARGV[3]
if lease == nil or #lease > 15 or not string.find(lease, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: lease must be a whole number of milliseconds >= 1')
end
if latch_ttl == nil or #latch_ttl > 15 or not string.find(latch_ttl, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: latch lifetime must be a whole number of milliseconds >= 1')
end
if ARGV[2] == nil or ARGV[2] == '' then
  return redis.error_reply('ERR lockwarden: empty owner field')
end
if ARGV[5] ~= nil and ARGV[5] ~= '0' and ARGV[5] ~= '1' then
  return redis.error_reply('ERR lockwarden: retry flag must be 0 or 1')
end
local quiet = ARGV[6] == '1'
local hand_lease, keep = ARGV[7], ARGV[8]
if KEYS[6] == nil or quiet then
  hand_lease = nil
elseif hand_lease == nil or #hand_lease > 15 or not string.find(hand_lease, '^[1-9]%d*$')
  or keep == nil or #keep > 15 or not string.find(keep, '^[1-9]%d*$') then
  return redis.error_reply('ERR lockwarden: handoff lease and token lifetime must be whole numbers of milliseconds >= 1')
end

-- Makes the first live place of the handoff queue the holder of the freed lock
-- and tells its process; answers its token, or nil when no place is live. Each
-- popped place costs a few commands, so at most 64 are looked at: places that
-- lapsed are few (a waiter's place lives a second past its last call).
local function hand_over()
  local t, now_ms
  for _ = 1, 64 do
    local field = redis.call('lpop', KEYS[5])
    if not field then
      return nil
    end
    t = t or redis.call('time')
    now_ms = now_ms or t[1] * 1000 + math.floor(t[2] / 1000)
    local lapses = redis.call('zscore', KEYS[6], field)
    if lapses then
      redis.call('zrem', KEYS[6], field)
    end
    local client = string.match(field, '^(.*):[^:]*$')
    -- The releasing field's own place is stale: it was granted by a local
    -- hand-over (transfer.lua), which does not look at places.
    if lapses and client and field ~= ARGV[2] and tonumber(lapses) > now_ms then
      redis.call('hset', KEYS[1], field, '1')
      redis.call('pexpire', KEYS[1], hand_lease)
      -- The fencing token as a grant makes it (lua/token_prelude.lua).
      local token = string.format('%.0f', next_token(KEYS[4], t, keep))
      local heard = redis.call('publish', 'lockwarden_handoff__channel:' .. string.sub(KEYS[4], 21)
        .. ':' .. client, 'g' .. token .. ',' .. field)
      if heard > 0 then
        return token
      end
      -- Nobody heard it: the waiter's process is gone (its subscription went
      -- with its connection) or not yet listening (a place taken with its
      -- first attempt, its subscription on the way: that waiter asks again
      -- once it listens). The hold is taken back, and the next place is
      -- looked at; the token it used is skipped, never given twice.
      redis.call('del', KEYS[1])
    end
  end
  return nil
end

-- ACL, as in acquire.lua: the commands after the first write are asked for
-- before it, on the path taken; the reads and the first write run with
-- redis.pcall, and a denial of one of them is only named. GET of the latch is
-- asked on every release, though only a retry runs it: a user without it would
-- otherwise find out on the first lost reply.
local acl = redis.acl_check_cmd

-- See acquire.lua.
local function refused(err, what, ...)
  if acl and not acl(...) then
    return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. what)
  end
  return err
end

local function deny(what)
  return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. what)
end

if acl and not acl('get', KEYS[3]) then
  return deny('GET on the release latch')
end

if ARGV[5] == '1' then
  local done = redis.call('get', KEYS[3])
  if done then
    if done == '1' then
      return 0
    end
    -- The first attempt left holds in place: report what remains of them now.
    local left = redis.pcall('hget', KEYS[1], ARGV[2])
    if type(left) == 'table' then
      return refused(left, 'HGET on the lock', 'hget', KEYS[1], ARGV[2])
    end
    left = tonumber(left)
    if left ~= nil and left > 0 then
      return left
    end
    return 1
  end
end

-- One HGET answers both "does the caller hold it" (false: no such field or key)
-- and "how many times".
local count = redis.pcall('hget', KEYS[1], ARGV[2])
if type(count) == 'table' then
  return refused(count, 'HGET on the lock', 'hget', KEYS[1], ARGV[2])
end
if not count then
  return -1
end
-- The usual case, a single hold, needs no number parsing.
local holds = 1
if count ~= '1' then
  holds = tonumber(count)
  if holds == nil then
    return redis.error_reply('ERR lockwarden: hold count is not a number')
  end
end
if holds > 1 then
  if acl then
    if not acl('hincrby', KEYS[1], ARGV[2], '-1') then
      return deny('HINCRBY on the lock')
    end
    if not acl('set', KEYS[3], '0', 'px', latch_ttl) then
      return deny('SET on the release latch')
    end
  end
  -- A lock-delay mark (acquire.lua) keeps the delay beyond the lease, and says
  -- when the lease ends.
  local mark = redis.call('hget', KEYS[1], 'lockwarden:delay')
  local ttl, delay, t = lease, nil, nil
  if mark then
    delay = string.match(mark, '^%d+,(%d+)$')
    if delay then
      if acl and not acl('hset', KEYS[1], 'lockwarden:delay', mark) then
        return deny('HSET on the lock')
      end
      ttl = string.format('%.0f', tonumber(lease) + tonumber(delay))
      t = redis.call('time')
    end
  end
  local r = redis.pcall('pexpire', KEYS[1], ttl)
  if type(r) == 'table' then
    return refused(r, 'PEXPIRE on the lock', 'pexpire', KEYS[1], ttl)
  end
  if delay then
    redis.call('hset', KEYS[1], 'lockwarden:delay', string.format('%.0f,%s',
      t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(lease), delay))
  end
  local left = redis.call('hincrby', KEYS[1], ARGV[2], '-1')
  redis.call('set', KEYS[3], '0', 'px', latch_ttl)
  return left
end

if acl then
  if not quiet and not acl('publish', KEYS[2], ARGV[4]) then
    return deny('PUBLISH on the unlock channel')
  end
  if not acl('set', KEYS[3], '1', 'px', latch_ttl) then
    return deny('SET on the release latch')
  end
  -- A user without the rights to the handoff keys hands nothing over: its
  -- ACL predates them, and nobody of its kind can have taken a place.
  if hand_lease and not (acl('lpop', KEYS[5]) and acl('zscore', KEYS[6], '0')
      and acl('zrem', KEYS[6], '0') and acl('zcard', KEYS[6]) and acl('hset', KEYS[1], '0', '1')
      and acl('time') and acl('set', KEYS[4], '1', 'px', keep, 'get')
      and acl('publish', 'lockwarden_handoff__channel:' .. string.sub(KEYS[4], 21) .. ':c', 'g')) then
    hand_lease = nil
  end
end
local r = redis.pcall('del', KEYS[1])
if type(r) == 'table' then
  return refused(r, 'DEL on the lock', 'del', KEYS[1])
end
if quiet then
  redis.call('set', KEYS[3], '1', 'px', latch_ttl)
  return {0}
end
if hand_lease and hand_over() then
  -- Handed over: no unlock message, as transfer.lua sends none, since everyone
  -- it would wake would find the lock taken. The answer counts those who wait
  -- (the one handed the lock, and the places left) as those who heard.
  local waiting = 1 + redis.call('zcard', KEYS[6])
  redis.call('set', KEYS[3], '1', 'px', latch_ttl)
  return {0, waiting, 1}
end
local heard = redis.call('publish', KEYS[2], ARGV[4])
redis.call('set', KEYS[3], '1', 'px', latch_ttl)
return {0, heard}
