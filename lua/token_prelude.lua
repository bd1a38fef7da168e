-- The fencing token of a grant, shared by lua/acquire.lua (a grant) and
-- lua/release.lua (a direct handoff), which the crate puts behind this file.
--
-- The token is the last token plus one, but never less than the server clock in
-- microseconds (TIME). A counter alone goes back in time whenever Redis loses
-- recent writes (a restart from an older snapshot, a failover to a replica that
-- missed them, the counter's own expiry) and would hand out a token again; the
-- clock does not go back with the data. So after such a loss the next token is
-- still above every earlier one, as long as the server clock now is past the
-- moment those were issued (docs/faults.md). Tokens thus follow the clock: only
-- more than one grant of a lock per microsecond runs them ahead of it, and then
-- the last token plus one wins.
--
-- SET ... GET writes the clock and reads the last token in one command, with the
-- counter's lifetime (set again at every grant, so a name no longer used leaves
-- nothing behind). Both numbers stay below 2^53, so Lua compares them exactly,
-- and %.0f writes them back exactly.
--
-- `counter` is the token counter's key, `t` the reply of TIME, `keep` the
-- counter's lifetime in whole milliseconds. Answers the token as a number.
local function next_token(counter, t, keep)
  local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  local token = tonumber(now)
  local last = tonumber(redis.call('set', counter, now, 'px', keep, 'get'))
  if last and last >= token then
    token = last + 1
    redis.call('set', counter, string.format('%.0f', token), 'px', keep)
  end
  return token
end

