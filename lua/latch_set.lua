-- latch_set.lua: give a count-down latch its count, unless it has one.
--
-- Redisson's RCountDownLatch layout: the latch is a string key, the name itself,
-- holding the count (absent: zero, open); its channel
-- redisson_countdownlatch__channel__{<name>} carries "1" for a new count and "0"
-- when the count reaches zero.
--
-- KEYS[1]  the latch key
-- KEYS[2]  its channel
-- ARGV[1]  the count, >= 1
--
-- Returns 1 when set (and "1" published), 0 when a count already exists.
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
-- Both writes asked for first (ACL, acl_prelude.lua): a count set but not
-- announced is refused whole instead.
need({
  {'SET on the latch', 'set', KEYS[1], ARGV[1]},
  {'PUBLISH on the latch channel', 'publish', KEYS[2], '1'},
})
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], '1')
return 1
