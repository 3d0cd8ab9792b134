-- wrk script: POST /v1/holds with confirm=true on one hot pool, a unique hold_id per request.
-- setup() runs once per wrk thread in the main Lua state and gives each thread its own id
-- prefix (a global in that thread's state), so ids never collide across threads or runs.
local thread_seq = 0
counter = 0

function setup(thread)
  thread_seq = thread_seq + 1
  thread:set("prefix", string.format("w%d-%d-", os.time(), thread_seq))
end

request = function()
  counter = counter + 1
  local body = '{"hold_id":"' .. prefix .. counter ..
      '","items":[{"pool":"hot","qty":1}],"confirm":true}'
  return wrk.format("POST", "/v1/holds", {["Content-Type"] = "application/json"}, body)
end
