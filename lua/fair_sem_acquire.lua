-- fair_sem_acquire.lua: take permits of a fair semaphore when the caller is at
-- the head of its queue (or the queue is empty) and enough are available, or
-- take (or keep) the caller's place in the queue.
--
-- KEYS[1..4] as in fair_sem_prelude.lua (semaphore, queue, places, channels)
-- KEYS[5]  the semaphore's channel, redisson_sc:{<name>} (asked for only: the
--          taker must be able to give the permits back)
-- ARGV[1]  permits wanted, a whole number >= 1
-- ARGV[2]  the waiter id, '<client id>:<n>'
-- ARGV[3]  how long a place is kept without a refresh, whole ms >= 1
-- ARGV[4]  '1' to take a place when the permits cannot be taken now, '0' to
--          only try
-- KEYS[6]  the waiter's op marker (once_prelude.lua; the waiter id is its op id)
-- ARGV[5]  the op marker's lifetime in ms
--
-- A waiter asks again under the same id when a reply was lost: the marker says
-- whether a copy took its permits already ({1, available}, nothing taken
-- twice). A waiter that left undid the id (fair_sem_undo.lua): a copy that runs
-- after that takes neither permits nor a place.
--
-- Returns {1, left} when taken (left: available now), or {0, available,
-- missing} when not (missing: 1 when the semaphore's key does not exist).
--
-- Strict FIFO, as java.util.concurrent.Semaphore(fair = true): a head that
-- wants more than is available blocks everyone behind it, and a caller behind a
-- head is refused even when its own permits are free. A head that takes its
-- permits and leaves some tells the new head on its channel, so that several
-- small waiters behind it are served by one release.
--
-- Every argument and key type is checked, and every write asked for (ACL), before
-- the first write: a script is not a transaction.
local want = tonumber(ARGV[1])
local place = tonumber(ARGV[3])
if want == nil or want < 1 or want ~= math.floor(want) then
  return redis.error_reply('ERR lockwarden: permits must be a whole number >= 1')
end
if ARGV[2] == nil or ARGV[2] == '' then
  return redis.error_reply('ERR lockwarden: empty waiter id')
end
if place == nil or place < 1 or place ~= math.floor(place) then
  return redis.error_reply('ERR lockwarden: place lease must be a whole number of milliseconds >= 1')
end
if ARGV[4] ~= '0' and ARGV[4] ~= '1' then
  return redis.error_reply('ERR lockwarden: queue flag must be 0 or 1')
end
local type_error = fair_sem_type_error()
if type_error then
  return type_error
end
local have, refused, absent = number_at_key()
if refused then
  return refused
end
local ttl = once_ttl(5)
local seen = once_seen(KEYS[6])
if seen == 'taken' then
  return {1, have}
elseif seen then
  return {0, have, 0}
end
local me = ARGV[2]
local now = server_ms()

local take_needs = {
  {'DECRBY on the semaphore', 'decrby', KEYS[1], ARGV[1]},
  {'INCRBY on the semaphore', 'incrby', KEYS[1], ARGV[1]},
  {'PUBLISH on the semaphore channel', 'publish', KEYS[5], '0'},
  {'LPOP on the queue', 'lpop', KEYS[2]},
  {'ZREM on the places', 'zrem', KEYS[3], me},
  {'PUBLISH on a waiter channel', 'publish', waiter_channel(me), '0'},
  once_need(KEYS[6]),
}
local queue_needs = {
  {'ZADD on the places', 'zadd', KEYS[3], '1', me},
  {'RPUSH on the queue', 'rpush', KEYS[2], me},
  {'PEXPIRE on the queue', 'pexpire', KEYS[2], ARGV[3]},
  {'PEXPIRE on the places', 'pexpire', KEYS[3], ARGV[3]},
  {'ZRANGE on the places', 'zrange', KEYS[3], '-1', '-1', 'withscores'},
}
local later = take_needs
if ARGV[4] == '1' then
  later = {}
  for _, c in ipairs(take_needs) do later[#later + 1] = c end
  for _, c in ipairs(queue_needs) do later[#later + 1] = c end
end
local popped = drop_lapsed(now, later)

local head = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
if (not head or head == me) and have >= want then
  need(take_needs)
  local left = redis.call('decrby', KEYS[1], want)
  once_note(KEYS[6], 'taken', ttl)
  if head == me then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], me)
    if left > 0 then
      tell_head()
    end
  end
  return {1, left}
end

if ARGV[4] == '1' then
  local queued = run('ZSCORE on the places', 'zscore', KEYS[3], me)
  need(queue_needs)
  if queued then
    -- Already queued: keep the place (a refresh that came with an attempt).
    redis.call('zadd', KEYS[3], 'xx', now + place, me)
  else
    -- A new place, at the back. ZADD first: refused out of memory before
    -- anything is written.
    redis.call('zadd', KEYS[3], now + place, me)
    redis.call('rpush', KEYS[2], me)
  end
  keep_queue(now, place)
end

-- Dropping a lapsed head may have made another the head: it is told (the
-- caller, when it is the one, has its answer already).
if popped > 0 then
  local new_head = redis.call('lindex', KEYS[2], 0)
  if new_head and new_head ~= me then
    redis.call('publish', waiter_channel(new_head), '0')
  end
end
if absent then
  return {0, have, 1}
end
return {0, have, 0}
