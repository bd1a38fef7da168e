-- fair_sem_prelude.lua: helpers of the fair semaphore's scripts
-- (fair_sem_acquire.lua, fair_sem_refresh.lua, fair_sem_release.lua). Redis
-- scripts cannot include one another, so src/wire/fair_semaphore.rs puts this
-- file (after acl_prelude.lua, for `run` and `need`) in front of each. It keeps
-- the rule every one of them applies first in one place: waiters whose place
-- lapsed are dropped from the head of the queue, on the server's clock. It only
-- defines functions.
--
-- Every user passes the same first four keys:
-- KEYS[1]  the semaphore, the name itself: a string of available permits
--          (Redisson's RSemaphore key, shared with plain acquirers)
-- KEYS[2]  the queue, lockwarden_semaphore_queue:{<name>}: waiter ids, head first
-- KEYS[3]  the places, lockwarden_semaphore_timeout:{<name>}: waiter id -> ms
--          (server clock) at which its place lapses
-- KEYS[4]  the waiters' channel prefix, lockwarden_semaphore_channel:{<name>};
--          a waiter's own channel is this followed by ':<waiter id>'

-- An error reply when a key holds another type than the fair semaphore uses.
local function fair_sem_type_error()
  local names = {'the semaphore', 'the queue', 'the places'}
  for i, want in ipairs({'string', 'list', 'zset'}) do
    local kind = run('TYPE on ' .. names[i], 'type', KEYS[i]).ok
    if kind ~= 'none' and kind ~= want then
      return redis.error_reply('WRONGTYPE lockwarden: ' .. KEYS[i] .. ' is a ' .. kind .. ', not a ' .. want)
    end
  end
  return nil
end

-- Milliseconds on the Redis server's clock: places never lapse by a client's.
local function server_ms()
  local t = run('TIME', 'time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A waiter's own channel.
local function waiter_channel(id)
  return KEYS[4] .. ':' .. id
end

-- Drops the waiters whose place lapsed at `now`, from the head only (behind a
-- live head they hold nobody up; they are dropped when they reach it). Returns
-- how many were dropped. `later`: the commands the caller runs after this, asked
-- for (ACL) before the first pop, which is then the script's first write.
local function drop_lapsed(now, later)
  local popped = 0
  while true do
    local first = run('LINDEX on the queue', 'lindex', KEYS[2], 0)
    if not first then break end
    local deadline = tonumber(run('ZSCORE on the places', 'zscore', KEYS[3], first))
    if deadline ~= nil and deadline > now then break end
    if popped == 0 then
      need({
        {'LPOP on the queue', 'lpop', KEYS[2]},
        {'ZREM on the places', 'zrem', KEYS[3], first},
        {'PUBLISH on a waiter channel', 'publish', waiter_channel(first), '0'},
      })
      need(later)
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], first)
    popped = popped + 1
  end
  return popped
end

-- Keeps both queue keys until the last place's deadline (at least `place` ms),
-- so that a queue whose waiters all died does not stay behind.
local function keep_queue(now, place)
  local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')
  local keep = place
  if last[2] then
    keep = math.max(math.floor(tonumber(last[2]) - now), place)
  end
  redis.call('pexpire', KEYS[2], keep)
  redis.call('pexpire', KEYS[3], keep)
end

-- Tells the waiter at the head, if any, that it may try now; returns it.
local function tell_head()
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    redis.call('publish', waiter_channel(head), '0')
  end
  return head
end
