-- once_prelude.lua: put in front of the scripts whose change a retry or a late
-- copy could apply twice (a permit given back, permits taken for a waiter, a
-- latch counted down, permits drained); Redis scripts cannot include one
-- another. Needs acl_prelude.lua in front of it (`run`, `need`).
--
-- Each such call carries an op id, and its marker key ({<name>}:lockwarden_done:
-- <op id>, in the name's slot) records what the first copy to run did, for a
-- lifetime the caller passes (Config::latch_ttl). A copy that finds the marker
-- answers from it and changes nothing. That covers both ways a change arrives
-- twice: a retry sent after a reply was lost, and a copy that sat in a frozen
-- server's input and runs when it resumes, after a retry on another
-- connection ran first.
--
-- A marker holds a word: 'taken' (permits taken for a waiter), 'back' (those
-- permits given back), 'cancelled' (the waiter left before any copy of its take
-- ran: a late copy takes nothing), or the number a counting change answered.

-- What the op's marker at `key` holds, or nil when no copy has run.
local function once_seen(key)
  local seen = run('GET on the op marker', 'get', key)
  if seen then
    return seen
  end
  return nil
end

-- The ACL check of the marker's write, for the caller's `need` list.
local function once_need(key)
  return {'SET on the op marker', 'set', key, 'x', 'px', '1'}
end

-- Records what this copy did, for `ttl` ms.
local function once_note(key, what, ttl)
  redis.call('set', key, what, 'px', ttl)
end

-- The marker lifetime in ARGV[i], checked as the other numbers are.
local function once_ttl(i)
  local ttl = ARGV[i]
  if ttl == nil or #ttl > 15 or not string.find(ttl, '^[1-9]%d*$') then
    error(redis.error_reply('ERR lockwarden: op marker lifetime must be a whole number of milliseconds >= 1'))
  end
  return ttl
end
