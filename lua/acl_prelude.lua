-- acl_prelude.lua: the ACL helpers of the read-write lock's scripts, the fair
-- lock's (in front of fair_prelude.lua) and force_release.lua; src/wire puts this
-- file in front of each of them when it builds the script, because Redis scripts
-- cannot include one another.
--
-- ACL (Redis 7+): a command the ACL denies fails a script where it stands, after the
-- writes before it. So the reads and the first write run with redis.pcall (`run`: a
-- denial there has written nothing; the script ends with NOPERM naming it), and the
-- commands after the first write are asked for before it, on the path taken
-- (`need`). Before Redis 7 there is no redis.acl_check_cmd and nothing is asked.
local acl = redis.acl_check_cmd
local function deny(what)
  return redis.error_reply('NOPERM lockwarden: this Redis user may not run ' .. what)
end
local function run(what, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if acl and not acl(...) then
      error(deny(what))
    end
    error(r)
  end
  return r
end
local function need(checks)
  if acl then
    for _, c in ipairs(checks) do
      if not acl(unpack(c, 2)) then
        error(deny(c[1]))
      end
    end
  end
end
