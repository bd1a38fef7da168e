-- batch.lua: run several exclusive-lock acquisitions and releases in one script call.
--
-- Not a script on its own: src/wire/batch.rs puts acquire.lua and release.lua in
-- front of it, each wrapped as a function whose parameters are named KEYS and ARGV
-- (op_acquire, op_release). Inside them those names are the op's own keys and
-- arguments, so both scripts run unchanged, and their `return` returns from the
-- function. One call over many locks saves the per-call cost of EVALSHA (parsing,
-- script lookup, setting up Lua), which at high load is most of what a pair costs.
--
-- KEYS     every op's keys, op after op, in the order the ops appear in ARGV
-- ARGV     per op: its script ('a' acquire.lua, 'r' release.lua), then its
--          arguments. The script fixes how many keys and arguments the op has
--          (acquire: 2 and 5, release: 3 and 5; with the direct handoff's
--          keys 'p' acquire: 4 and 6, 'h' release: 6 and 8), so no counts are sent.
--
-- Returns an array with one reply per op, in order: what that op's script returned,
-- or an error reply when it failed. Each op runs in pcall, so an op that fails (a key
-- of the wrong type, a bad argument) answers with its own error and the others run
-- as if alone. The layout is checked whole before the first op runs: a malformed
-- batch fails as a whole and writes nothing.
--
-- Out of memory under noeviction, Redis refuses a memory-growing command only while
-- the script has written nothing yet; that is per script call, not per op. So in a
-- batch whose earlier op wrote (a release's DEL, an acquisition that went through
-- before the limit), a later acquisition is not refused and may grow memory past the
-- limit by one lock; one that comes first is refused as a lone call would be. The
-- crate sends a single op as the plain script, whose behaviour is unchanged.
--
-- The per-op work here is kept to table constructors of a known size: at a few
-- hundred ops a call, any loop or number parsing per op costs more than the
-- EVALSHA it saves.

-- Each op's key and argument count, and a runner that hands it its own KEYS and
-- ARGV (k and a: where its keys and arguments start, less one).
local shapes = {
  a = {2, 5, function(k, a)
    return op_acquire({KEYS[k + 1], KEYS[k + 2]},
      {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]})
  end},
  r = {3, 5, function(k, a)
    return op_release({KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]},
      {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]})
  end},
  -- With the direct handoff's keys (acquire.lua's KEYS[3..4], release.lua's
  -- KEYS[4..6]): sent only by a manager with Config::direct_handoff, so that a
  -- user whose ACL predates those keys is not refused every lock change.
  p = {4, 6, function(k, a)
    return op_acquire({KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]},
      {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]})
  end},
  h = {6, 8, function(k, a)
    return op_release({KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5],
      KEYS[k + 6]}, {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5],
      ARGV[a + 6], ARGV[a + 7], ARGV[a + 8]})
  end},
}

local nargv = #ARGV
local a, k = 1, 0
while a <= nargv do
  local shape = shapes[ARGV[a]]
  if shape == nil then
    return redis.error_reply('ERR lockwarden: malformed batch at argument ' .. a)
  end
  a, k = a + 1 + shape[2], k + shape[1]
end
if a ~= nargv + 1 or k ~= #KEYS then
  return redis.error_reply('ERR lockwarden: batch does not match its keys and arguments')
end

local replies = {}
local n = 0
a, k = 1, 0
while a <= nargv do
  local shape = shapes[ARGV[a]]
  local ok, reply = pcall(shape[3], k, a)
  if not ok then
    -- A failed redis.call raises Redis's error message ("WRONGTYPE ...", "OOM
    -- ...": a code, then the text) as a string, or as a table {err = ...} on
    -- newer servers; a Lua runtime error raises "user_script:<line>: ...".
    if type(reply) == 'table' and reply.err then
      reply = redis.error_reply(reply.err)
    elseif type(reply) == 'string' and string.find(reply, '^%u[%u_]* ') then
      reply = redis.error_reply(reply)
    else
      reply = redis.error_reply('ERR lockwarden: ' .. tostring(reply))
    end
  elseif reply == nil then
    -- A nil would end the array here and shift every later reply.
    reply = false
  end
  n = n + 1
  replies[n] = reply
  a, k = a + 1 + shape[2], k + shape[1]
end
return replies
